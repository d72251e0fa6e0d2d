"""R18 in the console: the launch review shows the estimated minutes and cost beside the price
and runtime limit, and warns when the runtime limit is shorter than the estimate."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Browser, expect

from tests.browser.conftest import Console, describe
from tests.e2e.conftest import Api
from tests.e2e.flows import draft, ready


def test_r18_the_launch_review_shows_the_estimated_cost_and_warns_of_a_short_limit(
    browser: Browser, stack: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(stack, creds, name="Estimates")
    roomy = draft(org, config, max_runtime_minutes=240)
    # One epoch over a tiny dataset still needs the boot: more than one minute.
    short = draft(org, config, max_runtime_minutes=1)
    estimate = org.member.get(f"/v1/runs/{roomy['id']}").json()["estimate"]
    c = Console(browser, stack.base_url)
    try:
        p = c.sign_in(org.tokens["member"])
        p.goto(f"/runs/{roomy['id']}?confirm=launch")
        shown = p.locator("[data-launch-estimate]")
        expect(shown).to_contain_text(f"{estimate['minutes']} minutes")
        expect(shown).to_contain_text(f"${estimate['cost']}")
        expect(p.locator("[data-hourly-price]")).to_be_visible()
        expect(p.locator("[data-runtime-warning]")).to_have_count(0)
        expect(p.locator("[data-estimate]")).to_contain_text(f"${estimate['cost']}")
        critical = c.axe()
        assert not critical, describe(critical)

        p.goto(f"/runs/{short['id']}?confirm=launch")
        expect(p.locator("[data-runtime-warning]")).to_contain_text(
            "The runtime limit (1 min) is shorter than the estimate"
        )
    finally:
        c.close()
