"""Billing: this month's costs grouped by run, resource or day, in words and to the cent, a
cost-per-day chart, the network volume's monthly cost, and the FOCUS/CSV downloads (B1–B3)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query
from fastapi.responses import Response

from api.actions import billing, connections
from api.console.costs import Report, report
from api.console.forms import Errors, status_of, submit
from api.console.web import SignedIn, pages, render

router = pages()
GROUP_NAMES = {"run": "Run", "resource": "Resource", "day": "Day"}


@router.get("/billing")
def billing_page(p: SignedIn, group_by: Annotated[str, Query(max_length=20)] = "run") -> Response:
    caller = p.require("billing")
    errors: Errors = {}
    found: list[Report] = []

    def costs() -> None:
        found.append(report(p.backend.views, caller.org_id, p.backend.clock.now(), group_by))

    submit(p, errors, "group_by", costs)
    return render(
        p,
        "billing.html",
        status=status_of(errors),
        costs=found[0] if found else None,
        group_by=group_by,
        groups=GROUP_NAMES,
        storage=connections.storage_card(views=p.backend.views, org_id=caller.org_id),
        errors=errors,
    )


@router.get("/billing/export")
def billing_export(
    p: SignedIn, format: Annotated[str, Query(max_length=20)] = "focus-csv"
) -> Response:
    caller = p.require("billing")
    return billing.export(backend=p.backend, caller=caller, start=None, to=None, format=format)
