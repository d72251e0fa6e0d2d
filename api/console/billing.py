"""Billing: costs grouped by run, resource or day, and the FOCUS/CSV downloads (B1–B3)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Query
from fastapi.responses import Response

from api.actions import billing
from api.console.forms import Errors, status_of, submit
from api.console.web import SignedIn, pages, render

router = pages()


@router.get("/billing")
def billing_page(p: SignedIn, group_by: Annotated[str, Query(max_length=20)] = "run") -> Response:
    caller = p.require("billing")
    errors: Errors = {}
    found: list[dict[str, Any]] = []

    def costs() -> None:
        found.append(
            billing.costs(backend=p.backend, caller=caller, start=None, to=None, group_by=group_by)
        )

    submit(p, errors, "group_by", costs)
    return render(
        p,
        "billing.html",
        status=status_of(errors),
        costs=found[0] if found else None,
        group_by=group_by,
        errors=errors,
    )


@router.get("/billing/export")
def billing_export(
    p: SignedIn, format: Annotated[str, Query(max_length=20)] = "focus-csv"
) -> Response:
    caller = p.require("billing")
    return billing.export(backend=p.backend, caller=caller, start=None, to=None, format=format)
