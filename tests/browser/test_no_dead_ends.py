"""No dead ends: a draft is edited in the console (a too-low price limit is fixed, not started
over), and forms keep what was typed after a refusal."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Browser, expect

from tests.browser.conftest import Console, describe
from tests.browser.test_walk import BAD, jsonl
from tests.e2e.conftest import Api, Org
from tests.e2e.flows import draft, launch, ready, wait_state


def test_a_draft_is_edited_and_the_form_keeps_its_values(
    browser: Browser, stack: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(stack, creds, name="Editor")
    run = draft(org, config, price_limit_per_hour="0.50", max_runtime_minutes=45)
    before = len(org.member.get("/v1/runs").json())
    c = Console(browser, stack.base_url)
    try:
        p = c.sign_in(org.tokens["member"])
        p.goto(f"/runs/{run['id']}")
        p.get_by_role("link", name="Edit draft").click()
        expect(p.get_by_role("heading", level=1)).to_have_text(f"Edit draft {run['id'][:8]}")
        # The draft's own values, not the defaults.
        expect(p.get_by_label("Price limit ($/hour)")).to_have_value("0.50")
        expect(p.get_by_label("Maximum runtime (minutes)")).to_have_value("45")
        expect(
            p.locator(f'input[name="gpu_type_id"][value="{config["gpu_type_id"]}"]')
        ).to_be_checked()
        c.shot("33-edit-draft")
        critical = c.axe()
        assert not critical, describe(critical)

        # A refusal keeps what was typed.
        p.get_by_label("Price limit ($/hour)").fill("a lot")
        p.get_by_label("Maximum runtime (minutes)").fill("50")
        p.get_by_role("button", name="Save changes").click()
        expect(p.get_by_role("alert")).to_be_visible()
        expect(p.get_by_label("Price limit ($/hour)")).to_have_value("a lot")
        expect(p.get_by_label("Maximum runtime (minutes)")).to_have_value("50")
        expect(
            p.locator(f'input[name="gpu_type_id"][value="{config["gpu_type_id"]}"]')
        ).to_be_checked()
        assert org.member.get(f"/v1/runs/{run['id']}").json()["price_limit_per_hour"] == "0.50"

        p.get_by_label("Price limit ($/hour)").fill("2.00")
        p.get_by_role("button", name="Save changes").click()
        p.wait_for_url(f"{stack.base_url}/runs/{run['id']}")
        expect(p.locator("#run-status")).to_contain_text("limit $2.00/hour")
        body = org.member.get(f"/v1/runs/{run['id']}").json()
        assert (body["price_limit_per_hour"], body["max_runtime_minutes"]) == ("2.00", 50)
        assert len(org.member.get("/v1/runs").json()) == before  # the same draft, no new one

        # The dataset form keeps its name and version after a bad line.
        p.goto(f"/projects/{config['project_id']}")
        upload = p.locator("form", has=p.get_by_role("heading", name="Upload a dataset version"))
        upload.get_by_label("Dataset name").fill("support-chats")
        upload.get_by_label("Version").fill("7")
        upload.get_by_label("JSONL file").set_input_files(jsonl("chats-bad.jsonl", BAD))
        upload.get_by_role("button", name="Upload dataset").click()
        upload = p.locator("form", has=p.get_by_role("heading", name="Upload a dataset version"))
        expect(upload.get_by_role("alert")).to_contain_text("dataset-invalid")
        expect(upload.get_by_label("Dataset name")).to_have_value("support-chats")
        expect(upload.get_by_label("Version")).to_have_value("7")
        register = p.locator("form", has=p.get_by_role("heading", name="Register an object"))
        expect(register.get_by_label("Name of the dataset")).to_have_value("")

        # And the project form its name.
        p.goto("/projects")
        p.get_by_label("Project name").fill("x" * 201)  # over the limit: the server refuses
        p.evaluate("document.getElementById('name').removeAttribute('maxlength')")
        p.get_by_label("Project name").fill("y" * 300)
        p.get_by_role("button", name="Create project").click()
        expect(p.get_by_role("alert")).to_be_visible()
        expect(p.get_by_label("Project name")).to_have_value("y" * 300)
    finally:
        c.close()


def test_cleanup_offers_each_items_actions_and_the_volume(
    browser: Browser, stack: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(stack, creds, name="Tidy")
    stack.sandbox.set_scenario("export_fails", 1)
    run = draft(org, config)
    launch(org, run["id"])
    wait_state(org, run["id"], "needs_recovery", timeout=90)
    c = Console(browser, stack.base_url)
    try:
        p = c.sign_in(org.tokens["member"])
        p.get_by_role("navigation").get_by_role("link", name="Cleanup status").click()
        row = p.locator('tr[data-cleanup-kind="retained"]', has_text=run["id"][:8])
        expect(row).to_be_visible()
        for name in ("Recover the adapter", "Resume Pod", "Release Pod"):
            expect(row.get_by_role("link", name=name)).to_have_count(1)
        expect(p.locator("[data-volume]")).to_contain_text("$7.00 a month")
        c.shot("34-cleanup-actions")
        critical = c.axe()
        assert not critical, describe(critical)
        row.get_by_role("link", name="Release Pod").click()
        dialog = p.get_by_role("dialog", name="Release the Pod?")
        expect(dialog).to_contain_text("the only copy")
        assert org.member.get(f"/v1/runs/{run['id']}").json()["cleanup"]["pod_status"] == "stopped"
    finally:
        c.close()
    finance = Console(browser, stack.base_url)
    try:
        p = finance.sign_in(org.tokens["finance"])
        p.goto("/cleanup")
        row = p.locator('tr[data-cleanup-kind="retained"]', has_text=run["id"][:8])
        expect(row).to_be_visible()
        expect(row.get_by_role("link", name="Release Pod")).to_have_count(0)
    finally:
        finance.close()


def test_each_roles_home_page_says_what_that_role_can_do(
    browser: Browser, stack: Api, org: Org
) -> None:
    offered = {
        "owner": ("Settings → Connections", "Configure a run", "Billing", "Audit", "Members"),
        "member": ("Projects", "Configure a run", "Cleanup status"),
        "finance": ("Billing",),
        "auditor": ("Audit",),
    }
    never = {
        "member": ("Billing", "Audit", "Settings → Connections"),
        "finance": ("Configure a run", "Audit", "Settings → Connections"),
        "auditor": ("Configure a run", "Billing", "Settings → Connections"),
    }
    for role, links in offered.items():
        c = Console(browser, stack.base_url)
        try:
            p = c.sign_in(org.tokens[role])
            home = p.locator(f'[data-role-home="{role}"]')
            for name in links:
                expect(home.get_by_role("link", name=name)).not_to_have_count(0)
            for name in never.get(role, ()):
                expect(home.get_by_role("link", name=name)).to_have_count(0)
            if role in ("finance", "auditor"):
                expect(home).to_contain_text("your role changes nothing there")
                expect(p.get_by_text("connect RunPod")).to_have_count(0)
        finally:
            c.close()
