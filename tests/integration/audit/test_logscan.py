"""Issue 16: a rebuild's read of the log (`log_scan`) gives what the library's
`select_notifications` and mapper give, event for event, on SQLite and PostgreSQL; an event
the transcoder cannot read fails as the mapper fails it."""

from __future__ import annotations

from typing import Any

import pytest
from eventsourcing.persistence import MapperDeserialisationError
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.sqlite import SQLiteApplicationRecorder

from projections.store import logscan
from projections.store.logscan import events_at, log_scan
from tests.integration.audit.conftest import World


def _library(world: World, start: int, limit: int) -> list[tuple[int, str, Any]]:
    found = world.log.recorder.select_notifications(
        start=start, limit=limit, inclusive_of_start=False
    )
    return [(n.id, n.topic, world.log.mapper.to_domain_event(n)) for n in found]


def _as_values(events: list[tuple[int, str, Any]]) -> list[tuple[int, str, type, dict[str, Any]]]:
    """Each event's class and attributes, with their types (1 and 1.0 compare equal)."""
    return [
        (i, topic, type(e), {k: (type(v), v) for k, v in vars(e).items()}) for i, topic, e in events
    ]


def test_the_scan_reads_every_page_as_the_library_does(world: World) -> None:
    # the scan's own statements are what is read here, not the library's fallback
    assert type(world.log.recorder) in (PostgresApplicationRecorder, SQLiteApplicationRecorder)
    head = world.log.recorder.max_notification_id()
    scan = log_scan(world.log)
    start, pages = 0, 0
    while True:
        events, end, count = scan(start, 50)
        assert _as_values(events) == _as_values(_library(world, start, 50))
        assert count == len(events)
        if count == 0:
            assert end == start
            break
        assert end == events[-1][0]
        start, pages = end, pages + 1
    assert start == head
    assert pages == -(-head // 50)


def test_the_scan_keeps_only_the_wanted_topics_and_still_counts_every_row(
    world: World,
) -> None:
    every, _, _ = log_scan(world.log)(0, 10_000)
    wanted = frozenset({"tensorant.PodLaunched", "tensorant.RunDrafted"})
    events, end, count = log_scan(world.log, wanted)(0, 10_000)

    assert count == len(every)  # the page is read whole: its end moves past unwanted events
    assert end == every[-1][0]
    assert {t for _, t, _ in events} == wanted
    assert [i for i, _, _ in events] == [i for i, t, _ in every if t in wanted]


def test_an_event_the_transcoder_cannot_read_fails_as_the_mapper_fails_it(
    world: World,
) -> None:
    victim = world.execute(f"SELECT MAX({world.id_column}) FROM {{table}}")[0][0]
    world.execute(f"UPDATE {{table}} SET state = ? WHERE {world.id_column} = ?", b"{no", victim)

    with pytest.raises(MapperDeserialisationError) as library:
        _library(world, victim - 1, 1)
    with pytest.raises(MapperDeserialisationError) as ours:
        log_scan(world.log)(victim - 1, 1)
    assert str(ours.value) == str(library.value)


def test_events_at_reads_the_positions_asked_as_the_library_does(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = world.log.recorder.max_notification_id()
    every = {i: e for i, _, e in _library(world, 0, 10_000)}
    asked = [head, 1, 2, 2, head // 2, head + 5]  # unordered, repeated, one past the end
    found = events_at(world.log, asked)
    assert sorted(found) == sorted({1, 2, head // 2, head})
    assert _as_values([(i, "", e) for i, e in sorted(found.items())]) == _as_values(
        [(i, "", every[i]) for i in sorted(found)]
    )
    assert events_at(world.log, []) == {}
    monkeypatch.setattr(logscan, "_SQLITE_VARIABLES", 7)  # SQLite: in several statements
    many = list(range(1, head + 1))
    assert head > 7 and sorted(events_at(world.log, many)) == many


def test_events_at_on_another_recorder_reads_through_the_library() -> None:
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate

    app: Application[Any] = Application(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    ids = [app.save(Aggregate()) for _ in range(5)]
    assert ids
    found = events_at(app, [4, 2, 9])
    assert sorted(found) == [2, 4]
    assert all(type(e).__name__ == "Created" for e in found.values())


def test_events_at_leaves_out_what_the_mapper_cannot_decode(world: World) -> None:
    """Altered bytes that no longer decode read as an event the log lost: the audit lists the
    entry's position and hash only (`entry`) and `verify` reports it, no error."""
    head = world.log.recorder.max_notification_id()
    world.execute(f"UPDATE {{table}} SET state = ? WHERE {world.id_column} = ?", b"{not json", 2)
    assert sorted(events_at(world.log, [1, 2, head])) == [1, head]
