"""People's words: the run page's history names members by email (not `user:<uuid>`) and shows
times in the reader's own zone, relative, with the exact time on hover; without scripts the
server's UTC time to the second (no microseconds)."""

from __future__ import annotations

import re
from typing import Any

from playwright.sync_api import Browser, expect

from tests.browser.conftest import Console, ConsoleHttp, describe
from tests.e2e.conftest import Api
from tests.e2e.flows import draft, ready


def test_the_history_names_people_and_reads_its_times(
    browser: Browser, stack: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(stack, creds, name="Words")
    run = draft(org, config)
    members = org.owner.get("/v1/members").json()
    email = next(m["email"] for m in members if m["role"] == "member")

    c = Console(browser, stack.base_url)
    try:
        p = c.sign_in(org.tokens["owner"])
        p.goto(f"/runs/{run['id']}")
        expect(p.get_by_role("heading", level=1)).to_have_text(
            f"support-bot · Training trial {run['id'][:8]}"
        )
        row = p.get_by_role("region", name="The run's events").locator("tbody tr").first
        expect(row.locator("td").nth(3)).to_have_text(email)
        when = row.locator("time")
        expect(when).to_have_attribute("data-local", "true")
        assert re.search(r"second|minute|now", when.inner_text()), when.inner_text()
        title = when.get_attribute("title") or ""
        assert re.search(r"\d{4}", title) and "." not in title.split(" ")[-1], title
        assert "user:" not in p.locator("#run-status").inner_text()
        critical = c.axe()
        assert not critical, describe(critical)
    finally:
        c.close()

    plain = ConsoleHttp(stack.base_url, org.tokens["owner"])  # what a page without scripts shows
    try:
        html = plain.http.get(f"/runs/{run['id']}").text
        shown = re.findall(r"<time datetime=\"[^\"]+\" title=\"[^\"]+\">([^<]+)</time>", html)
        assert shown and all(
            re.fullmatch(r"\d{1,2} [A-Z][a-z]{2} \d{4}, \d\d:\d\d:\d\d UTC", s) for s in shown
        ), shown
        assert f"<td>{email}</td>" in html
    finally:
        plain.close()
