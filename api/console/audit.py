"""Audit: the organization's history, the hash chain's verification, and any object as it was
at a time (U1–U3)."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import Query
from fastapi.responses import Response

from api.actions import audit
from api.console.web import SignedIn, pages, render
from api.console.words import people

router = pages()


@router.get("/audit")
def audit_page(
    p: SignedIn,
    verify: Annotated[bool, Query()] = False,
    after: Annotated[int, Query(ge=0)] = 0,
) -> Response:
    caller = p.require("audit")
    events = audit.events(backend=p.backend, caller=caller, after=after, limit=100)
    chain = audit.verify_chain(backend=p.backend, caller=caller) if verify else None
    known = people(p.backend.views, caller.org_id)
    return render(p, "audit.html", events=events, chain=chain, people=known)


@router.get("/audit/{aggregate_type}/{aggregate_id}")
def audit_state_page(
    aggregate_type: str,
    aggregate_id: str,
    p: SignedIn,
    as_of: Annotated[str | None, Query(max_length=40)] = None,
) -> Response:
    """U2 in the console: one object as it was at a time (the API's `as_of`), secrets redacted."""
    caller = p.require("audit")
    state = audit.as_of(
        backend=p.backend,
        caller=caller,
        kind=aggregate_type,
        aggregate_id=aggregate_id,
        when=as_of or None,
    )
    return render(
        p,
        "audit_state.html",
        aggregate_type=aggregate_type,
        aggregate_id=aggregate_id,
        as_of=as_of or "",
        state=json.dumps(state, indent=2, sort_keys=True, default=str, ensure_ascii=False),
    )
