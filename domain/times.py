"""Times as the API, the events' views and the reports write them: UTC ISO 8601 with `Z`."""

from __future__ import annotations

from datetime import UTC, datetime

# The text of aware times formatted lately. A view rebuild formats each event's time once per
# view that shows it (the audit entry, the run's history, the billing hour...): 12% of its CPU
# went to formatting the same times again. Equal aware times are the same instant, so they
# share one text; cleared when full (a rebuild's page of 20,000 events fits).
_TEXTS: dict[datetime, str] = {}
_TEXTS_MAX = 65_536


def iso(value: datetime) -> str:
    """`2026-11-01T12:00:00Z` (aware times in any zone are converted to UTC)."""
    try:
        return _TEXTS[value]
    except KeyError:
        pass
    except TypeError:  # not a datetime (unhashable): let astimezone say what is wrong
        return _format(value)
    text = _format(value)
    if type(value) is datetime and value.utcoffset() is not None:
        # a naive time is read in the machine's zone, which may change: never kept
        if len(_TEXTS) >= _TEXTS_MAX:
            _TEXTS.clear()
        _TEXTS[value] = text
    return text


def _format(value: datetime) -> str:
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
