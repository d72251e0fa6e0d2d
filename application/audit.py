"""U2: an aggregate's state as it was at a past time, replayed from its own events."""

from __future__ import annotations

from dataclasses import asdict, is_dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from application.log import TensorantLog
from domain.errors import NotFound
from domain.times import iso


def _plain(value: Any) -> Any:
    if is_dataclass(value) and not isinstance(value, type):  # a value object (RunConfig)
        return _plain(asdict(value))
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_plain(v) for v in value]
    if isinstance(value, Decimal | UUID):
        return str(value)
    if isinstance(value, datetime):
        return iso(value)
    return value


def state_as_of(log: TensorantLog, aggregate_id: str, as_of: datetime) -> dict[str, Any]:
    """The aggregate after its last event at or before `as_of` (NotFound if none was yet)."""
    try:
        uid = UUID(aggregate_id)
    except ValueError:
        raise NotFound(f"aggregate {aggregate_id} not found") from None
    version = None
    for event in log.events.get(uid):
        if getattr(event, "timestamp", as_of) > as_of:
            break
        version = event.originator_version
    if version is None:
        raise NotFound(f"aggregate {aggregate_id} did not exist at {as_of.isoformat()}")
    aggregate: Any = log.repository.get(uid, version=version)
    state = {
        k.lstrip("_"): _plain(v)
        for k, v in vars(aggregate).items()
        if k not in ("_pending_events",)
    }
    return {
        "id": aggregate_id,
        "type": type(aggregate).__name__.lower(),
        "version": version,
        "as_of": iso(as_of),
        "state": state,
    }
