"""Times as the API, the events' views and the reports write them: UTC ISO 8601 with `Z`."""

from __future__ import annotations

from datetime import UTC, datetime


def iso(value: datetime) -> str:
    """`2026-11-01T12:00:00Z` (aware times in any zone are converted to UTC)."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def parse_iso(value: str) -> datetime:
    """An ISO 8601 date or time as aware UTC; a time without a zone is UTC.

    Raises ValueError when `value` is not ISO 8601.
    """
    t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    try:
        return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:00-05:00 is in no representable UTC year
        raise ValueError(f"{value!r} is outside the representable calendar") from None
