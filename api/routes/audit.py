"""Audit (U1–U3): the organization's event history, state as of a time, the hash chain."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from api.deps import Auditor, ClockDep, LogDep, ViewsDep
from api.schemas.common import AUTHENTICATED, MAX_CURSOR
from application.audit import state_as_of
from domain.errors import NotFound
from projections.reports.costs import parse_when
from projections.views.audit import (
    AUDIT,
    ENTRY_FIELDS,
    GENESIS,
    INDEX,
    InvalidAnchor,
    entries,
    verify,
)

router = APIRouter(prefix="/v1/audit", tags=["audit"], responses=AUTHENTICATED)

_FIELDS = tuple(f for f in ENTRY_FIELDS if f != "topic")


def redacted(value: Any) -> Any:
    """Token hashes are credentials' fingerprints: the audit API never shows them (they stay
    in the stored events, so the hash chain still verifies)."""
    if isinstance(value, dict):
        return {k: redacted(v) for k, v in value.items() if not str(k).endswith("token_hash")}
    if isinstance(value, list):
        return [redacted(v) for v in value]
    return value


@router.get("/events")
def events(
    caller: Auditor,
    views: ViewsDep,
    log: LogDep,
    after: Annotated[int, Query(ge=0, le=MAX_CURSOR)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    aggregate_id: str | None = None,
    type: str | None = None,
) -> dict[str, Any]:
    """U1: events in log order after `after`, filtered by aggregate id or event type."""
    found = entries(log, views, caller.org_id, after, limit, aggregate_id, type)
    out = [{k: redacted(e[k]) for k in _FIELDS} for e in found]
    next_after = out[-1]["position"] if len(out) == limit else None
    return {"events": out, "next_after": next_after}


@router.get("/verify")
def verify_chain(
    caller: Auditor,
    log: LogDep,
    views: ViewsDep,
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
    if (anchor_position is None) != (anchor_head is None):
        raise InvalidAnchor("give both anchor_position and anchor_head, or neither")
    anchors = None
    if anchor_position is not None and anchor_head is not None:
        anchors = {caller.org_id: (anchor_position, anchor_head)}
    result = verify(log, views, caller.org_id, anchors=anchors)
    head = result.heads.get(caller.org_id, {"position": 0, "head": GENESIS, "count": 0})
    return {
        "ok": result.ok,
        "events_checked": result.events_checked,
        "first_bad_position": result.first_bad_position,
        **head,
    }


@router.get("/{aggregate_type}/{aggregate_id}")
def as_of(
    aggregate_type: str,
    aggregate_id: str,
    caller: Auditor,
    log: LogDep,
    views: ViewsDep,
    clock: ClockDep,
    as_of: Annotated[str | None, Query(description="ISO 8601; default: now")] = None,
) -> dict[str, Any]:
    """U2: any Connection, Storage, Run (or other aggregate) as it was at `as_of`."""
    owner = views.get(AUDIT, INDEX, f"agg:{aggregate_id}")
    if owner is None or owner["org_id"] != caller.org_id or owner["type"] != aggregate_type:
        raise NotFound(f"{aggregate_type} {aggregate_id} not found")
    state: dict[str, Any] = redacted(state_as_of(log, aggregate_id, parse_when(as_of, clock.now())))
    return state
