"""Audit (U1–U3): the organization's event history, state as of a time, the hash chain."""

from __future__ import annotations

from typing import Any

from api.deps import Backend, Caller
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

_FIELDS = tuple(f for f in ENTRY_FIELDS if f != "topic")


def redacted(value: Any) -> Any:
    """Token hashes are credentials' fingerprints: the audit never shows them (they stay in
    the stored events, so the hash chain still verifies)."""
    if isinstance(value, dict):
        return {k: redacted(v) for k, v in value.items() if not str(k).endswith("token_hash")}
    if isinstance(value, list):
        return [redacted(v) for v in value]
    return value


def events(
    *,
    backend: Backend,
    caller: Caller,
    after: int,
    limit: int,
    aggregate_id: str | None = None,
    type: str | None = None,
) -> dict[str, Any]:
    """U1: events in log order after `after`, filtered by aggregate id or event type."""
    log, views = backend.services.log, backend.views
    found = entries(log, views, caller.org_id, after, limit, aggregate_id, type)
    out = [{k: redacted(e[k]) for k in _FIELDS} for e in found]
    next_after = out[-1]["position"] if len(out) == limit else None
    return {"events": out, "next_after": next_after}


def verify_chain(
    *,
    backend: Backend,
    caller: Caller,
    anchor_position: int | None = None,
    anchor_head: str | None = None,
) -> dict[str, Any]:
    """U3: recompute the organization's hash chain from the event store, and check an anchor
    (a `position` and `head` reported earlier) when given."""
    if (anchor_position is None) != (anchor_head is None):
        raise InvalidAnchor("give both anchor_position and anchor_head, or neither")
    anchors = None
    if anchor_position is not None and anchor_head is not None:
        anchors = {caller.org_id: (anchor_position, anchor_head)}
    result = verify(backend.services.log, backend.views, caller.org_id, anchors=anchors)
    head = result.heads.get(caller.org_id, {"position": 0, "head": GENESIS, "count": 0})
    return {
        "ok": result.ok,
        "events_checked": result.events_checked,
        "first_bad_position": result.first_bad_position,
        **head,
    }


def as_of(
    *, backend: Backend, caller: Caller, kind: str, aggregate_id: str, when: str | None
) -> dict[str, Any]:
    """U2: the aggregate of that `kind` (Connection, Storage, Run, ...) as it was at `when`
    (default: now), secrets' fingerprints redacted."""
    owner = backend.views.get(AUDIT, INDEX, f"agg:{aggregate_id}")
    if owner is None or owner["org_id"] != caller.org_id or owner["type"] != kind:
        raise NotFound(f"{kind} {aggregate_id} not found")
    at = parse_when(when, backend.clock.now())
    state: dict[str, Any] = redacted(state_as_of(backend.services.log, aggregate_id, at))
    return state
