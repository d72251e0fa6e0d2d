"""Acceptance 1 and 5 on a phone: every console page each role can reach, at 390×844, is no
wider than the screen (tables scroll inside their own box, the sidebar folds behind Menu) and
axe-core finds nothing critical."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from playwright.sync_api import Browser, expect

from tests.browser.conftest import Console, describe
from tests.e2e.conftest import Api, Org
from tests.e2e.flows import draft, launch, ready, wait_state

PHONE = {"width": 390, "height": 844}
# Pages reached only by a link's GET; downloads, streams and static files are not pages.
NOT_PAGES = re.compile(r"^/(billing/export|console/static|v1/|docs|openapi)|/logs/stream$")
ID = re.compile(r"[0-9a-f]{8}-[0-9a-f-]{27,}|\d{4}-\d\d-\d\dT[^&/]*")


def _shape(url: str) -> str:
    """One page per shape: /audit/run/<id> once, not once per run; but every run's page (each
    in another state, with other actions)."""
    parts = urlsplit(url)
    if parts.path.startswith("/runs/"):
        return url
    query = "&".join(
        sorted(q.split("=")[0] + "=" + q.split("=")[1] for q in parts.query.split("&") if "=" in q)
    )
    return ID.sub("*", parts.path) + "?" + ID.sub("*", query)


def phone(browser: Browser, base_url: str) -> Console:
    c = Console(browser, base_url)
    c.context.close()
    c.context = browser.new_context(base_url=base_url, viewport=PHONE)
    c.page = c.context.new_page()
    return c


def an_organization_with_every_kind_of_page(stack: Api, creds: dict[str, Any]) -> tuple[Org, str]:
    """Connected, a project with a dataset, a draft, a succeeded trial, one awaiting recovery
    (Resume and Release offered) and one running (Cancel offered)."""
    org, config = ready(stack, creds, name="Phone")
    draft(org, config)
    done = draft(org, config)
    launch(org, done["id"])
    wait_state(org, done["id"], "succeeded", timeout=90)
    stack.sandbox.set_scenario("export_fails", 1)
    retained = draft(org, config)
    launch(org, retained["id"])
    wait_state(org, retained["id"], "needs_recovery", timeout=90)
    stack.sandbox.set_scenario("hang", 1)
    running = draft(org, config)
    launch(org, running["id"])
    wait_state(org, running["id"], "running", timeout=90)
    return org, running["id"]


def test_every_page_of_every_role_fits_a_phone(
    browser: Browser, stack: Api, creds: dict[str, Any]
) -> None:
    org, running = an_organization_with_every_kind_of_page(stack, creds)
    for role in ("owner", "member", "finance", "auditor"):
        c = phone(browser, stack.base_url)
        try:
            p = c.sign_in(org.tokens[role])
            # The sidebar is folded: Menu opens the links.
            menu = p.get_by_role("button", name="Menu")
            expect(menu).to_have_attribute("aria-expanded", "false")
            runs_link = p.get_by_role("navigation").get_by_role("link", name="Tune → Runs")
            expect(runs_link).to_be_hidden()
            menu.click()
            expect(runs_link).to_be_visible()

            queue = ["/", f"/runs/{running}"]
            if role in ("owner", "finance"):
                queue += ["/billing?group_by=resource", "/billing?group_by=day"]
            seen: set[str] = set()
            visited: list[str] = []
            while queue and len(visited) < 40:
                path = queue.pop(0)
                if _shape(path) in seen:
                    continue
                seen.add(_shape(path))
                p.goto(stack.base_url + path)
                expect(p.locator("main")).to_be_visible()
                visited.append(path)
                wide = p.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
                assert wide[1] == PHONE["width"], wide
                assert wide[0] <= wide[1], f"{role} {path}: {wide[0]} px wide on {wide[1]}"
                c.shot(f"40-phone-{role}-{len(visited):02d}")
                critical = c.axe()
                assert not critical, f"{role} {path}: {describe(critical)}"
                for href in p.eval_on_selector_all(
                    "a[href^='/']", "els => els.map(e => e.getAttribute('href'))"
                ):
                    if not NOT_PAGES.search(urlsplit(href).path):
                        queue.append(href)
            # Each role reached its own pages (the crawl followed the links it is shown).
            shapes = {_shape(v) for v in visited}
            assert "/runs?" in shapes and "/cleanup?" in shapes, (role, shapes)
            assert ("/billing?" in shapes) == (role in ("owner", "finance")), (role, shapes)
            assert ("/audit?" in shapes) == (role in ("owner", "auditor")), (role, shapes)
            if role == "owner":
                assert "/settings/members?" in shapes and "/runs/new" in shapes, shapes
        finally:
            c.close()
