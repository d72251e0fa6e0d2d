"""Custom S3: Recover your adapter in the browser — resume with the billing warning (refused
without it), then Verify and recover with the adapter.zip retrieved from the Pod."""

from __future__ import annotations

import time
from typing import Any

import httpx
from playwright.sync_api import FilePayload, expect

from tests.browser.conftest import Console
from tests.browser.test_same_events import A100, api_run, price_of
from tests.e2e.conftest import Api, Org, connect, custom_spec
from tests.e2e.flows import project_with_dataset

LONG = 60_000


def _wait(org: Org, run_id: str, state: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run: dict[str, Any] = org.member.get(f"/v1/runs/{run_id}").json()
        if run["state"] == state:
            return run
        time.sleep(0.3)
    raise AssertionError(f"run {run_id} never reached {state}: {run}")


def test_custom_s3_resume_then_verify_and_recover_in_the_browser(
    console: Console, stack: Api, org: Org, creds: dict[str, Any]
) -> None:
    connect(org, creds)
    assert org.owner.put("/v1/storage", json=custom_spec(creds)).status_code == 200
    project_id, dv_id = project_with_dataset(org)
    config = {**api_run(), "project_id": project_id, "dataset_version_id": dv_id}
    run = org.member.post("/v1/runs", json=config).json()
    assert run["gpu_type_id"] == A100
    stack.sandbox.set_scenario("export_fails", 1)
    body = {"confirm": True, "accepted_price_per_hour": price_of(org)}
    assert org.member.post(f"/v1/runs/{run['id']}/launch", json=body).status_code == 202
    _wait(org, run["id"], "needs_recovery")

    p = console.sign_in(org.tokens["member"])
    p.goto(f"/runs/{run['id']}")
    expect(p.get_by_role("heading", name="Recover your adapter")).to_be_visible()
    expect(p.get_by_role("button", name="Verify the saved adapter")).to_have_count(0)
    p.get_by_role("link", name="Resume Pod").click()
    dialog = p.get_by_role("dialog", name="Restart the stopped Pod?")
    expect(dialog).to_contain_text("GPU billing resumes")
    dialog.get_by_role("button", name="Resume Pod").click()
    expect(p.get_by_text("ssh.runpod.io").first).to_be_visible()
    pod_id = org.member.get(f"/v1/runs/{run['id']}").json()["pod_id"]
    data = httpx.get(
        f"{stack.sandbox.base_url}/_sandbox/pods/{pod_id}/files/workspace/data/adapter.zip"
    ).content
    p.get_by_label("adapter.zip").set_input_files(
        files=FilePayload(name="adapter.zip", mimeType="application/zip", buffer=data)
    )
    p.get_by_role("button", name="Verify and recover").click()
    expect(p.locator("[data-run-state]")).to_have_text("succeeded", timeout=LONG)
    expect(p.locator("[data-adapter]")).to_contain_text("Adapter verified", timeout=LONG)
    console.shot("24-custom-s3-recovered")
    assert not console.axe()
