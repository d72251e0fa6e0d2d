"""`iso` writes every time as UTC with `Z`, whether or not it formatted an equal time before."""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from domain import times
from domain.times import iso


def test_equal_instants_in_other_zones_share_one_text() -> None:
    utc = datetime(2026, 11, 1, 12, 0, 0, 123456, tzinfo=UTC)
    paris = utc.astimezone(timezone(timedelta(hours=1)))
    assert iso(paris) == "2026-11-01T12:00:00.123456Z"  # formatted first, then kept
    assert iso(utc) == "2026-11-01T12:00:00.123456Z"
    assert iso(utc.replace(microsecond=0)) == "2026-11-01T12:00:00Z"


def test_a_kept_text_is_the_one_of_that_instant() -> None:
    times._TEXTS.clear()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    moments = [start + timedelta(seconds=s) for s in range(0, 5000, 7)]
    first = [iso(m) for m in moments]
    again = [iso(m.astimezone(timezone(timedelta(hours=-5)))) for m in reversed(moments)]
    assert first == [m.isoformat().replace("+00:00", "Z") for m in moments]
    assert again == list(reversed(first))
    assert len(times._TEXTS) == len(moments)


def test_the_kept_texts_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(times, "_TEXTS_MAX", 10)
    times._TEXTS.clear()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    texts = [iso(start + timedelta(minutes=m)) for m in range(25)]
    assert len(times._TEXTS) <= 10
    assert texts[24] == "2026-01-01T00:24:00Z"
    assert iso(start) == "2026-01-01T00:00:00Z"  # formatted again after it was dropped


def test_a_naive_time_is_read_in_the_current_zone_every_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    naive = datetime(2026, 6, 1, 12, 0)
    try:
        monkeypatch.setenv("TZ", "UTC")
        time.tzset()
        assert iso(naive) == "2026-06-01T12:00:00Z"
        monkeypatch.setenv("TZ", "Etc/GMT-2")  # POSIX sign: two hours east of UTC
        time.tzset()
        assert iso(naive) == "2026-06-01T10:00:00Z"
    finally:
        monkeypatch.undo()
        time.tzset()
    assert naive not in times._TEXTS
    assert os.environ.get("TZ") != "Etc/GMT-2"
