"""Acceptance 1 (billing people can read): money cells to the cent with the exact figure on
hover, columns in words, runs named by project and a short id, no None/True cells, a cost per
day chart and the network volume's monthly cost."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from playwright.sync_api import Browser, expect

from tests.browser.conftest import Console, describe
from tests.e2e.conftest import Api
from tests.e2e.flows import draft, launch, ready, wait_state

SHOWN = re.compile(r"^(\$\d{1,3}(,\d{3})*\.\d\d|<\$0\.01)$")
EXACT = re.compile(r"^exactly \$\d{1,3}(,\d{3})*\.\d{2,6}$")


def test_finance_reads_the_months_costs(
    browser: Browser, stack: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(stack, creds, name="Ledger")
    run = draft(org, config)
    launch(org, run["id"])
    wait_state(org, run["id"], "succeeded", timeout=90)
    total = Decimal(org.finance.get("/v1/billing/costs").json()["total"])

    c = Console(browser, stack.base_url)
    try:
        p = c.sign_in(org.tokens["finance"])
        p.get_by_role("navigation").get_by_role("link", name="Billing").click()
        table = p.get_by_role("table", name="Costs by run")
        expect(table).to_be_visible()
        headers = table.locator("thead th").all_inner_texts()
        assert headers == ["Run", "Resource", "Hours billed", "Our estimate", "Cost", "Source"]

        # The run by its project and the start of its id, linking to its page.
        row = table.locator("tbody tr", has_text=f"support-bot · {run['id'][:8]}")
        expect(row).to_have_count(1)
        expect(row.get_by_role("link")).to_have_attribute("href", f"/runs/{run['id']}")
        # A run of a few seconds costs less than a cent: shown so, its exact cost on hover.
        cost = row.locator("td.money [data-money]").last
        expect(cost).to_have_text("<$0.01")
        assert re.fullmatch(r"exactly \$0\.\d*[1-9]\d*", cost.get_attribute("title") or "")
        # The network volume's own line, and its monthly cost (100 GB at $0.07/GB-month).
        expect(table.locator("tbody tr", has_text="Network volume nv7eu1ro4k")).to_have_count(1)
        expect(p.locator("[data-volume-month]")).to_have_text("$7.00 a month")

        cells = p.locator("[data-money]")
        assert cells.count() >= 5  # the total, then two per line
        for i in range(cells.count()):
            cell = cells.nth(i)
            assert SHOWN.match(cell.inner_text()), cell.inner_text()
            assert EXACT.match(cell.get_attribute("title") or ""), cell.get_attribute("title")
        # The total agrees with the API's, to the cent.
        assert cells.first.inner_text() == f"${total:,.2f}" or (
            cells.first.inner_text() == "<$0.01" and total == 0
        )
        for text in table.locator("td, th").all_inner_texts():
            assert text.strip() not in ("None", "True", "False", ""), text
            assert not re.fullmatch(r"[0-9a-f-]{36}", text.strip()), text

        # The cost per day: one bar per day of the month so far, today's above zero.
        chart = p.get_by_role("img", name=re.compile("Cost per day"))
        expect(chart).to_be_visible()
        bars = p.locator("svg rect[data-day]")
        today = bars.last
        assert int(today.get_attribute("height") or 0) > 0
        assert int(bars.first.get_attribute("data-day")[-2:]) == 1  # type: ignore[index]
        c.shot("30-billing-readable")
        critical = c.axe()
        assert not critical, describe(critical)

        for group, first in (("Day", "Day"), ("Resource", "Resource")):
            p.get_by_label("Group costs by").select_option(label=group)
            p.get_by_role("button", name="Show").click()
            table = p.get_by_role("table", name=f"Costs by {group.lower()}")
            expect(table.locator("thead th").first).to_have_text(first)
            for text in table.locator("td, th").all_inner_texts():
                assert text.strip() not in ("None", "True", "False", ""), (group, text)
            money = table.locator("[data-money]").all_inner_texts()
            assert money and all(SHOWN.match(m) for m in money), money
        expect(
            p.get_by_role("table", name="Costs by resource").locator("tbody tr", has_text="Pod ")
        ).to_have_count(1)
    finally:
        c.close()
