"""Acceptance 2 and 5: what each role sees and may do in the console, and the connection dialog
walked with the keyboard alone."""

from __future__ import annotations

import json
import re
from typing import Any

from playwright.sync_api import Page, expect

from tests.browser.conftest import Console, ConsoleHttp, describe
from tests.e2e.conftest import Api, Org, connect, volume_spec


def test_a_member_sees_no_connection_buttons_and_a_direct_post_is_refused(
    console: Console, stack: Api, org: Org, creds: dict[str, Any]
) -> None:
    p = console.sign_in(org.tokens["member"])
    nav = p.get_by_role("navigation")
    expect(nav.get_by_role("link", name="Tune → Runs")).to_be_visible()
    expect(nav.get_by_role("link", name="Billing")).to_have_count(0)
    expect(nav.get_by_role("link", name="Audit")).to_have_count(0)
    nav.get_by_role("link", name="Settings → Connections").click()
    expect(p.get_by_role("heading", name="RunPod")).to_be_visible()
    for name in ("Connect RunPod", "Use RunPod volume", "Connect S3 storage"):
        expect(p.get_by_role("link", name=name)).to_have_count(0)
    console.shot("20-member-connections")
    assert not console.axe(), "member connections page"

    forger = ConsoleHttp(stack.base_url, org.tokens["member"])
    try:
        for path, data in (
            ("/settings/connections/runpod", {"api_key": creds["api_key"]}),
            ("/settings/connections/runpod/disconnect", {}),
            ("/settings/connections/storage", {"kind": "runpod_volume", "volume_id": "x"}),
        ):
            r = forger.post(path, data)
            assert r.status_code == 403, (path, r.status_code)
            assert "Your role does not allow this" in r.text
            assert "ask an owner" in r.text
        assert org.owner.get("/v1/connections").json()["compute"]["status"] == "not_connected"
        # The direct visit of an owner's page is refused too.
        assert forger.http.get("/billing").status_code == 403
        assert forger.http.get("/audit").status_code == 403
    finally:
        forger.close()


def test_finance_downloads_the_focus_file_and_an_auditor_verifies_the_chain(
    browser: Any, stack: Api, org: Org, creds: dict[str, Any]
) -> None:
    connect(org, creds)
    finance = Console(browser, stack.base_url)
    try:
        p = finance.sign_in(org.tokens["finance"])
        expect(p.get_by_role("navigation").get_by_role("link", name="Audit")).to_have_count(0)
        p.get_by_role("navigation").get_by_role("link", name="Billing").click()
        expect(p.get_by_text("Total this month")).to_be_visible()
        finance.shot("21-finance-billing")
        critical = finance.axe()
        assert not critical, describe(critical)
        with p.expect_download() as info:
            p.get_by_role("link", name="FOCUS CSV").click()
        path = info.value.path()
        header = path.read_text().splitlines()[0]
        assert "BilledCost" in header and "ChargePeriodStart" in header, header
        assert info.value.suggested_filename.endswith(".csv")
    finally:
        finance.close()

    auditor = Console(browser, stack.base_url)
    try:
        p = auditor.sign_in(org.tokens["auditor"])
        expect(p.get_by_role("navigation").get_by_role("link", name="Billing")).to_have_count(0)
        p.get_by_role("navigation").get_by_role("link", name="Audit").click()
        expect(p.get_by_role("table")).to_contain_text("ConnectionSaved")
        p.get_by_role("button", name="Verify the chain").click()
        expect(p.locator("[data-chain-ok]")).to_have_attribute("data-chain-ok", "true")
        expect(p.get_by_role("status")).to_contain_text("Chain verified")
        auditor.shot("22-auditor-audit")
        critical = auditor.axe()
        assert not critical, describe(critical)
        # U2: an object as it was at the time of one of its events, then at a time of choice.
        p.get_by_role("link", name=re.compile(r"^connection .* as of ")).last.click()
        expect(p.get_by_role("heading", level=1)).to_contain_text("connection")
        expect(p.locator("[data-state]")).to_contain_text('"status"')
        assert creds["api_key"] not in p.content()
        auditor.shot("23-auditor-state-as-of")
        critical = auditor.axe()
        assert not critical, describe(critical)
        p.get_by_label("State as of").fill("not a time")
        p.get_by_role("button", name="Show").click()
        expect(p.get_by_role("alert")).to_contain_text("is not an ISO 8601 date or time")
        assert p.locator("[data-state]").count() == 0
    finally:
        auditor.close()


def tab_to(p: Page, text: str) -> None:
    for _ in range(40):
        p.keyboard.press("Tab")
        if p.evaluate("document.activeElement.textContent.trim()") == text:
            return
    raise AssertionError(f"Tab never reached {text}")


def test_the_connect_runpod_dialog_works_with_the_keyboard_alone(
    console: Console, org: Org, creds: dict[str, Any]
) -> None:
    p = console.sign_in(org.tokens["owner"])
    p.get_by_role("navigation").get_by_role("link", name="Settings → Connections").click()
    kb = p.keyboard
    tab_to(p, "Connect RunPod")
    kb.press("Enter")
    dialog = p.get_by_role("dialog")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_label("RunPod API key")).to_be_focused()
    # Escape closes the dialog; Enter on the button opens it again.
    kb.press("Escape")
    expect(p.get_by_role("dialog")).to_have_count(0)
    tab_to(p, "Connect RunPod")
    kb.press("Enter")
    expect(p.get_by_role("dialog").get_by_label("RunPod API key")).to_be_focused()
    kb.type("rpa_wrong_" + "Y" * 30)
    kb.press("Tab")
    expect(p.get_by_role("dialog").get_by_role("button", name="Connect RunPod")).to_be_focused()
    kb.press("Enter")
    expect(p.get_by_role("dialog").get_by_role("alert")).to_contain_text("RunPod rejected")
    expect(p.get_by_role("dialog").get_by_label("RunPod API key")).to_be_focused()
    kb.type(creds["api_key"])
    kb.press("Enter")  # submits the dialog's form
    expect(p.get_by_role("dialog")).to_have_count(0)
    expect(p.get_by_role("link", name="Replace key")).to_be_visible()
    console.shot("23-keyboard-connected")


def test_the_new_run_form_offers_the_models_on_the_organizations_storage(
    console: Console, stack: Api, org: Org, creds: dict[str, Any]
) -> None:
    """P2 in the console: the base-model list is the API's (catalogue plus storage:models/*)."""
    connect(org, creds)
    card = org.owner.put("/v1/storage", json=volume_spec(creds))
    assert card.status_code == 200, card.text
    config = {
        "model_type": "llama",
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "vocab_size": 512,
    }
    volume = card.json()["volume_id"]
    stack.sandbox.write_volume_file(
        volume, "models/house-llama/config.json", json.dumps(config).encode()
    )
    p = console.sign_in(org.tokens["member"])
    p.goto(f"{stack.base_url}/runs/new")
    options = p.locator("select[name=base_model] option").all_inner_texts()
    assert "storage:models/house-llama" in options, options
    assert "Qwen/Qwen2.5-7B-Instruct" in options


def test_the_new_run_form_refuses_a_gpu_too_small_for_the_base_model_with_the_figure(
    console: Console, stack: Api, org: Org, creds: dict[str, Any]
) -> None:
    """R2 in the console: the GPUs are judged for the form's base model by the memory model."""
    connect(org, creds)
    card = org.owner.put("/v1/storage", json=volume_spec(creds))
    assert card.status_code == 200, card.text
    p = console.sign_in(org.tokens["member"])
    p.goto(f"{stack.base_url}/runs/new")  # the default base model: Qwen/Qwen2.5-7B-Instruct
    small = p.locator('tr[data-gpu="NVIDIA RTX A4000"]')
    expect(small.locator("input[type=radio]")).to_be_disabled()
    expect(small).to_contain_text("Qwen/Qwen2.5-7B-Instruct needs")
    expect(small).to_contain_text("the GPU has 16 GB")
    expect(p.locator('tr[data-gpu="NVIDIA GeForce RTX 4090"] input[type=radio]')).to_be_enabled()
