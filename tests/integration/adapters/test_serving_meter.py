"""V2: the chat rate limit's token bucket and the usage counts live in the store beside the
log, so two API processes (here two meters on one database) draw from one bucket per
organization and add to one total per deployment."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.serving_meter import PostgresServingMeter, SQLiteServingMeter
from tests.conftest import _create_schema, _drop_schema


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def two_meters(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    opened: list[Any] = []
    schema = ""
    open_one: Callable[[], Any]
    if request.param == "sqlite":
        open_one = lambda: SQLiteServingMeter(tmp_path / "serving.db")  # noqa: E731
    else:
        url = request.getfixturevalue("postgres_url")
        schema = f"meter_{uuid.uuid4().hex[:10]}"
        _create_schema(schema)
        open_one = lambda: PostgresServingMeter(url, schema=schema)  # noqa: E731
    try:
        opened.extend([open_one(), open_one()])
        yield opened[0], opened[1]
    finally:
        for meter in opened:
            meter.close()
        if schema:
            _drop_schema(schema)


def test_two_processes_draw_from_one_bucket_and_add_to_one_total(
    two_meters: tuple[Any, Any],
) -> None:
    a, b = two_meters
    # Three a minute: full at first, one token every 20 s.
    assert [m.take("chat:org", 3, 3 / 60, 1000.0) for m in (a, b, a)] == [0, 0, 0]
    assert b.take("chat:org", 3, 3 / 60, 1001.0) == 19  # empty: the next token in 19 s
    assert a.take("chat:other", 3, 3 / 60, 1001.0) == 0  # another organization's bucket
    assert a.take("chat:org", 3, 3 / 60, 1020.0) == 0  # refilled one
    assert b.take("chat:org", 3, 3 / 60, 1020.5) == 20

    a.add_usage("dep1", {"requests": 1, "prompt_tokens": 12, "completion_tokens": 5})
    b.add_usage("dep1", {"requests": 1, "errors": 1})
    b.add_usage("dep2", {"requests": 1, "cold_starts": 1})
    assert a.usage(["dep1", "dep2", "dep3"]) == {
        "dep1": {
            "requests": 2,
            "prompt_tokens": 12,
            "completion_tokens": 5,
            "errors": 1,
            "cold_starts": 0,
        },
        "dep2": {
            "requests": 1,
            "prompt_tokens": 0,
            "completion_tokens": 0,
            "errors": 0,
            "cold_starts": 1,
        },
    }
    assert b.usage([]) == {}
