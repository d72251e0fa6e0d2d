"""Acceptance 2: the run page is one consistent, live status. A run's page is opened as it
launches and follows it to success (its status fragment and its log stream both live); every
render of the page on the way (each change of its DOM, recorded in the page as it happens) is
checked: what it says is one server render's, never a terminal state together with a running
Pod or Cancel, progress that matches the state, and a state history that grows."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Browser, expect

from tests.browser.conftest import Console, describe
from tests.e2e.conftest import Api
from tests.e2e.flows import draft, launch, ready, until

TERMINAL = ("succeeded", "failed", "cancelled")
RECORD = """() => {
  window.renders = [];
  const one = (sel) => document.querySelector(sel);
  const text = (sel) => one(sel) ? one(sel).textContent : null;
  const attr = (sel, name) => one(sel) ? one(sel).getAttribute(name) : null;
  const snap = () => window.renders.push({
    state: text('[data-run-state]'),
    rendered: attr('#run-status', 'data-state'),
    pod: attr('[data-pod-status]', 'data-pod-status'),
    cancel: document.querySelector('#cancel-link') !== null,
    progress: text('[data-progress]'),
    history: Array.from(document.querySelectorAll('#run-status tbody tr td:nth-child(2)'))
      .map(td => td.textContent),
  });
  snap();
  new MutationObserver(snap).observe(document.querySelector('main'),
    {subtree: true, childList: true, characterData: true, attributes: true});
}"""


def test_the_run_page_follows_a_run_to_success_consistently(
    browser: Browser, stack: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(stack, creds, name="Live")
    run = draft(org, config)
    c = Console(browser, stack.base_url)
    try:
        p = c.sign_in(org.tokens["member"])
        launch(org, run["id"])  # from elsewhere; the page opens on the launching run
        until(lambda: org.member.get(f"/v1/runs/{run['id']}").json()["state"] != "draft")
        p.goto(f"/runs/{run['id']}")
        p.evaluate(RECORD)
        expect(p.locator("[data-run-state]")).to_have_text("succeeded", timeout=90_000)
        expect(p.locator("[data-release]")).to_have_text("Pod released", timeout=60_000)
        renders: list[dict[str, Any]] = p.evaluate("window.renders")
        c.shot("32-live-succeeded")
        critical = c.axe()
        assert not critical, describe(critical)
    finally:
        c.close()

    states = [r["state"] for r in renders]
    # It was followed, not only seen at its start and end.
    assert set(states) - {"draft", *TERMINAL}, states
    for r in renders:
        # What the page says is one server render's: no field of it is changed on its own.
        assert r["state"] == r["rendered"], r
        if r["state"] in TERMINAL:
            assert r["pod"] != "running" and not r["cancel"], r
        if r["state"] not in ("running", "exporting") and r["progress"]:
            assert r["progress"].startswith("training reached step"), r
        if r["state"] in ("running", "exporting") and r["pod"] is not None:
            assert r["pod"] == "running", r
    # The history grew while the page was open, up to the run's success.
    assert renders[0]["state"] not in TERMINAL, renders[0]
    assert renders[-1]["history"][-1] == "RunSucceeded", renders[-1]
    assert len({len(r["history"]) for r in renders}) > 2, [r["history"] for r in renders]
    # Nothing left refreshing once the run ended and its Pod was released.
    assert renders[-1]["pod"] == "terminated" and not renders[-1]["cancel"]
