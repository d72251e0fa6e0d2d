"""Acceptance 1 (confirm what destroys or bills): cancel, disconnect, release and resume ask
first, saying what happens to money and files; nothing happens until the question is answered,
with scripts or without."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Browser, Request, expect

from tests.browser.conftest import Console, describe
from tests.e2e.conftest import Api
from tests.e2e.flows import draft, history, launch, ready, wait_state

# What a cancel, release or resume leaves in the run's history (reports arriving late from the
# Pod, such as TrainingStarted, may be recorded meanwhile: they are not the console's doing).
ACTED = ("Cancel", "Terminat", "Resum", "Releas", "Stop")


def _events(org: Any, run_id: str) -> list[str]:
    return [e["type"] for e in history(org, run_id) if any(a in e["type"] for a in ACTED)]


def test_cancel_asks_before_cancelling(browser: Browser, stack: Api, creds: dict[str, Any]) -> None:
    org, config = ready(stack, creds, name="Careful")
    stack.sandbox.set_scenario("hang", 1)  # the run stays running until cancelled
    run = draft(org, config)
    launch(org, run["id"])
    wait_state(org, run["id"], "running", timeout=90)
    before = _events(org, run["id"])

    c = Console(browser, stack.base_url)
    posts: list[str] = []

    def seen(request: Request) -> None:
        if request.method == "POST":
            posts.append(request.url)

    try:
        p = c.sign_in(org.tokens["member"])
        c.page.on("request", seen)
        p.goto(f"/runs/{run['id']}")
        p.get_by_role("link", name="Cancel run").click()
        dialog = p.get_by_role("dialog", name="Cancel this run?")
        expect(dialog).to_be_visible()
        expect(dialog).to_contain_text("The Pod is terminated")
        expect(dialog).to_contain_text("files are deleted")
        expect(dialog).to_contain_text("Cost so far: $")
        expect(dialog.get_by_role("button", name="Cancel the run")).to_be_focused()
        c.shot("31-cancel-asks")
        critical = c.axe()
        assert not critical, describe(critical)
        # Asking posted nothing and changed nothing: the page answered, so a cancel would
        # already be in the run's events.
        assert posts == []
        assert _events(org, run["id"]) == before
        assert org.member.get(f"/v1/runs/{run['id']}").json()["state"] == "running"

        # Escape (or "Go back") leaves the run running.
        p.keyboard.press("Escape")
        expect(p.get_by_role("dialog")).to_have_count(0)
        expect(p.get_by_role("link", name="Cancel run")).to_be_visible()
        assert posts == [] and _events(org, run["id"]) == before

        p.get_by_role("link", name="Cancel run").click()
        p.get_by_role("dialog").get_by_role("button", name="Cancel the run").click()
        expect(p.locator("[data-run-state]")).to_have_text("cancelled", timeout=60_000)
        assert posts == [f"{stack.base_url}/runs/{run['id']}/cancel"]
        assert wait_state(org, run["id"], "cancelled")["state_reason"] == "user_cancelled"
    finally:
        c.close()


def test_without_scripts_every_destructive_button_is_a_question_first(
    browser: Browser, stack: Api, creds: dict[str, Any]
) -> None:
    """Release and resume of a retained Pod, and Disconnect, with JavaScript off."""
    org, config = ready(stack, creds, name="NoScript")
    stack.sandbox.set_scenario("export_fails", 1)
    run = draft(org, config)
    launch(org, run["id"])
    wait_state(org, run["id"], "needs_recovery", timeout=90)
    before = _events(org, run["id"])

    context = browser.new_context(base_url=stack.base_url, java_script_enabled=False)
    try:
        c = Console(browser, stack.base_url)
        c.context.close()
        c.context, c.page = context, context.new_page()
        p = c.sign_in(org.tokens["owner"])

        p.goto(f"/runs/{run['id']}")
        p.get_by_role("link", name="Release Pod").click()
        dialog = p.get_by_role("dialog", name="Release the Pod?")
        expect(dialog).to_contain_text("its files are deleted")
        expect(dialog).to_contain_text("the only copy")
        p.get_by_role("link", name="Go back").click()
        p.get_by_role("link", name="Resume Pod").click()
        dialog = p.get_by_role("dialog", name="Restart the stopped Pod?")
        expect(dialog).to_contain_text("GPU billing resumes")
        expect(dialog).to_contain_text("files are kept")
        p.get_by_role("link", name="Go back").click()
        assert _events(org, run["id"]) == before
        assert org.member.get(f"/v1/runs/{run['id']}").json()["cleanup"]["pod_status"] == "stopped"

        p.goto("/settings/connections")
        p.get_by_role("link", name="Disconnect").click()
        dialog = p.get_by_role("dialog", name="Disconnect RunPod?")
        expect(dialog).to_contain_text("no run can launch")
        expect(dialog).to_contain_text("nv7eu1ro4k and its files stay")
        expect(dialog).to_contain_text("$7.00 a month")
        # (axe cannot run with scripts off; test_narrow checks these dialogs with it.)
        p.get_by_role("link", name="Keep it connected").click()
        assert org.owner.get("/v1/connections").json()["compute"]["status"] == "connected"
    finally:
        context.close()
