"""Audit (U1–U3): the organization's event history, state as of a time, the hash chain."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from api.actions import audit
from api.deps import Auditor, BackendDep
from api.schemas.common import AUTHENTICATED, MAX_CURSOR

router = APIRouter(prefix="/v1/audit", tags=["audit"], responses=AUTHENTICATED)


@router.get("/events")
def events(
    caller: Auditor,
    backend: BackendDep,
    after: Annotated[int, Query(ge=0, le=MAX_CURSOR)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    aggregate_id: str | None = None,
    type: str | None = None,
) -> dict[str, Any]:
    """U1: events in log order after `after`, filtered by aggregate id or event type."""
    return audit.events(
        backend=backend,
        caller=caller,
        after=after,
        limit=limit,
        aggregate_id=aggregate_id,
        type=type,
    )


@router.get("/verify")
def verify_chain(
    caller: Auditor,
    backend: BackendDep,
    anchor_position: Annotated[
        int | None,
        Query(ge=1, le=MAX_CURSOR, description="A `position` this endpoint reported earlier"),
    ] = None,
    anchor_head: Annotated[
        str | None,
        Query(pattern="^[0-9a-f]{64}$", description="The `head` reported with that position"),
    ] = None,
) -> dict[str, Any]:
    """U3: recompute the organization's hash chain from the event store.

    Keep the `position` and `head` it reports somewhere outside this system; passed back as
    `anchor_position` and `anchor_head`, they prove the history up to there is unchanged even if
    someone with database access forged an event and rebuilt the audit view to match.
    """
    return audit.verify_chain(
        backend=backend, caller=caller, anchor_position=anchor_position, anchor_head=anchor_head
    )


@router.get("/{aggregate_type}/{aggregate_id}")
def as_of(
    aggregate_type: str,
    aggregate_id: str,
    caller: Auditor,
    backend: BackendDep,
    as_of: Annotated[str | None, Query(description="ISO 8601; default: now")] = None,
) -> dict[str, Any]:
    """U2: any Connection, Storage, Run (or other aggregate) as it was at `as_of`."""
    return audit.as_of(
        backend=backend, caller=caller, kind=aggregate_type, aggregate_id=aggregate_id, when=as_of
    )
