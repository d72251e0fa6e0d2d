"""Times at the edge of the calendar with an offset are refused as ValueError
(a 4xx, or a trainer line's arrival time), never an OverflowError (a 500)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from api.routes.trainer import _time
from domain.times import parse_iso


@pytest.mark.parametrize("value", ["9999-12-31T23:59:59-05:00", "0001-01-01T00:00:00+01:00"])
def test_an_offset_beyond_the_calendar_is_a_value_error(value: str) -> None:
    with pytest.raises(ValueError, match="calendar"):
        parse_iso(value)


def test_a_trainer_line_at_the_calendar_edge_keeps_its_arrival_time() -> None:
    before = datetime.now(UTC)
    assert _time("9999-12-31T23:59:59-05:00") >= before
    assert _time("2026-11-30T10:00:00+01:00") == datetime(2026, 11, 30, 9, tzinfo=UTC)
