"""Acceptance 1, 5 and 6: the guide walked end to end in Chromium as an owner — with every page
checked by axe-core and screenshotted into tests/browser/artifacts/."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import FilePayload, expect

from tests.browser.conftest import Console, describe
from tests.builders import CHATS
from tests.e2e.conftest import Api, Org

A100 = "NVIDIA A100 80GB PCIe"
T4 = "Tesla T4"
LONG = 60_000


BAD = CHATS.splitlines(keepends=True)[0] + b'{"messages": [{"role": "user", "content": "?"}]}\n'


def jsonl(name: str, data: bytes) -> FilePayload:
    return FilePayload(name=name, mimeType="application/jsonl", buffer=data)


def check(console: Console, name: str) -> None:
    console.shot(name)
    critical = console.axe()
    assert not critical, f"{name}: {describe(critical)}"


def configure_and_launch(console: Console) -> str:
    p = console.page
    p.get_by_role("navigation").get_by_role("link", name="Tune → Runs").click()
    p.get_by_role("link", name="Configure a run").click()
    p.get_by_label("Training trial · a small sample").check()
    p.locator(f'input[name="gpu_type_id"][value="{A100}"]').check()
    p.get_by_label("Price limit ($/hour)").fill("2.00")
    p.get_by_role("button", name="Save trial draft").click()
    expect(p.locator("[data-run-state]")).to_have_text("draft")
    run_id = p.url.rsplit("/", 1)[1]
    p.get_by_role("link", name="Launch trial").click()
    dialog = p.get_by_role("dialog")
    expect(dialog).to_contain_text(re.compile(r"\$\d+\.\d+/hour"))
    expect(dialog).to_contain_text("What keeps billing")
    return run_id


def test_owner_walks_the_guide(
    console: Console, stack: Api, org: Org, creds: dict[str, Any]
) -> None:
    p = console.sign_in(org.tokens["owner"])
    check(console, "01-home")

    # Settings → Connections: a wrong key first, then the right one.
    p.get_by_role("navigation").get_by_role("link", name="Settings → Connections").click()
    expect(p.get_by_role("heading", name="RunPod")).to_be_visible()
    check(console, "02-connections-not-connected")
    p.get_by_role("link", name="Connect RunPod").click()
    dialog = p.get_by_role("dialog")
    dialog.get_by_label("RunPod API key").fill("rpa_" + "X" * 40)
    dialog.get_by_role("button", name="Connect RunPod").click()
    alert = p.get_by_role("dialog").get_by_role("alert")
    expect(alert).to_contain_text("RunPod rejected the API key")
    expect(alert).to_contain_text("paste a current key from RunPod")
    check(console, "03-connect-runpod-wrong-key")
    p.get_by_role("dialog").get_by_label("RunPod API key").fill(creds["api_key"])
    p.get_by_role("dialog").get_by_role("button", name="Connect RunPod").click()
    expect(p.locator("section", has_text="RunPod").first).to_contain_text("Connected")
    expect(p.get_by_role("link", name="Replace key")).to_be_visible()

    # Data storage: Use RunPod volume, a wrong secret (the failing step), then the right pair.
    p.get_by_role("link", name="Use RunPod volume").click()
    p.get_by_label("Network volume").select_option("nv7eu1ro4k|EU-RO-1")
    expect(p.get_by_role("link", name="Enter the volume ID instead")).to_be_visible()
    p.get_by_label("S3 access key").fill(creds["s3_access_key_id"])
    p.get_by_label("S3 secret").fill("rps_wrong_secret_" + "0" * 20)
    p.get_by_role("button", name="Connect storage").click()
    expect(p.get_by_role("alert")).to_contain_text("step")
    check(console, "04-storage-check-failed")
    p.get_by_label("Network volume").select_option("nv7eu1ro4k|EU-RO-1")
    p.get_by_label("S3 access key").fill(creds["s3_access_key_id"])
    p.get_by_label("S3 secret").fill(creds["s3_secret_access_key"])
    p.get_by_role("button", name="Connect storage").click()
    storage = p.locator("section", has=p.get_by_role("heading", name="Data storage"))
    expect(storage).to_contain_text("Connected")
    expect(storage).to_contain_text("nv7eu1ro4k")
    check(console, "05-connections-connected")

    # A project and a dataset version.
    p.get_by_role("navigation").get_by_role("link", name="Projects").click()
    p.get_by_label("Project name").fill("support-bot")
    p.get_by_role("button", name="Create project").click()
    expect(p.get_by_role("heading", name="support-bot")).to_be_visible()
    upload = p.locator("form", has=p.get_by_role("heading", name="Upload a dataset version"))
    upload.get_by_label("Dataset name").fill("support-chats")
    upload.get_by_label("Version").fill("1")
    upload.get_by_label("JSONL file").set_input_files(jsonl("chats-bad.jsonl", BAD))
    upload.get_by_role("button", name="Upload dataset").click()
    upload = p.locator("form", has=p.get_by_role("heading", name="Upload a dataset version"))
    expect(upload.get_by_role("alert")).to_contain_text("dataset-invalid")
    expect(upload.locator(".line-errors")).to_contain_text("line 2")
    check(console, "06-dataset-bad-line")
    upload.get_by_label("Dataset name").fill("support-chats")
    upload.get_by_label("Version").fill("1")
    upload.get_by_label("JSONL file").set_input_files(jsonl("chats.jsonl", CHATS))
    upload.get_by_role("button", name="Upload dataset").click()
    expect(p.get_by_role("table")).to_contain_text("support-chats")
    check(console, "06b-project")
    p.get_by_role("navigation").get_by_role("link", name="Projects").click()
    check(console, "07-projects")

    # Configure a run: a T4 is shown as not eligible, with the reason.
    p.get_by_role("navigation").get_by_role("link", name="Tune → Runs").click()
    p.get_by_role("link", name="Configure a run").click()
    t4 = p.locator(f'tr[data-gpu="{T4}"]')
    expect(t4).to_contain_text("Not eligible")
    expect(t4).to_contain_text("pre-Ampere")
    expect(t4.locator("input")).to_be_disabled()
    check(console, "08-configure-a-run")

    run_id = configure_and_launch(console)
    check(console, "09-launch-confirmation")
    p.get_by_role("dialog").get_by_role("button", name="Confirm launch").click()
    expect(p.locator("#training-logs li").first).to_be_visible(timeout=LONG)
    expect(p.locator("[data-adapter]")).to_contain_text("Adapter verified", timeout=LONG)
    expect(p.locator("[data-release]")).to_contain_text("Pod released", timeout=LONG)
    expect(p.locator("[data-run-state]")).to_have_text("succeeded", timeout=LONG)
    expect(p.locator("#training-logs")).to_have_attribute("data-ended", "true", timeout=LONG)
    assert p.locator("#training-logs li").count() >= 2
    check(console, "10-run-succeeded")

    # A run whose export fails: retained in cleanup, recovered with "Verify the saved adapter".
    stack.sandbox.set_scenario("export_fails", 1)
    run2 = configure_and_launch(console)
    assert run2 != run_id
    p.get_by_role("dialog").get_by_role("button", name="Confirm launch").click()
    expect(p.locator("[data-run-state]")).to_have_text("needs_recovery", timeout=LONG)
    p.get_by_role("navigation").get_by_role("link", name="Cleanup status").click()
    row = p.locator('tr[data-cleanup-kind="retained"]', has_text=run2[:8])
    expect(row).to_be_visible()
    check(console, "11-cleanup-retained")
    row.get_by_role("link", name=run2[:8], exact=True).click()
    p.get_by_role("button", name="Verify the saved adapter").click()
    expect(p.locator("[data-run-state]")).to_have_text("succeeded", timeout=LONG)
    expect(p.locator("[data-adapter]")).to_contain_text("Adapter verified", timeout=LONG)
    check(console, "12-recovered")
    p.get_by_role("navigation").get_by_role("link", name="Tune → Runs").click()
    expect(p.locator(f'tr[data-run="{run2}"]')).to_contain_text("succeeded")
    check(console, "13-runs")
    p.get_by_role("navigation").get_by_role("link", name="Cleanup status").click()
    expect(p.get_by_text("Nothing left billing")).to_be_visible(timeout=LONG)
    check(console, "14-cleanup-empty")
    p.get_by_role("navigation").get_by_role("link", name="Billing").click()
    check(console, "15-billing")
    p.get_by_role("navigation").get_by_role("link", name="Audit").click()
    p.get_by_role("button", name="Verify the chain").click()
    expect(p.locator("[data-chain-ok]")).to_have_attribute("data-chain-ok", "true")
    check(console, "16-audit")

    # No page the owner saw carries key material (C6).
    secrets = (
        creds["api_key"],
        creds["s3_secret_access_key"],  # (the S3 access key id is the account id, shown)
        org.tokens["owner"],
    )
    for html in console.pages:
        for secret in secrets:
            assert secret not in html
