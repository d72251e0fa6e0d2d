"""A rebuild's read of the log (`log_scan`) gives what the library's
`select_notifications` and mapper give, event for event, on SQLite and PostgreSQL; an event
the transcoder cannot read fails as the mapper fails it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from eventsourcing.application import Application
from eventsourcing.cryptography import AESCipher
from eventsourcing.persistence import MapperDeserialisationError
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.sqlite import SQLiteApplicationRecorder

from application.log import TensorantLog
from projections.store import logscan
from projections.store.base import canonical
from projections.store.logscan import events_at, log_scan, stored_log
from projections.views.audit import event_state
from tests.integration.audit.conftest import World


def _library(world: World, start: int, limit: int) -> list[tuple[int, str, Any, None]]:
    found = world.log.recorder.select_notifications(
        start=start, limit=limit, inclusive_of_start=False
    )
    return [(n.id, n.topic, world.log.mapper.to_domain_event(n), None) for n in found]


def _as_values(events: list[Any]) -> list[tuple[int, str, type, dict[str, Any]]]:
    """Each (id, topic, event, ...)'s class and attributes, with their types (1 and 1.0
    compare equal)."""
    return [
        (i, topic, type(e), {k: (type(v), v) for k, v in vars(e).items()})
        for i, topic, e, *_ in events
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
    assert {t for _, t, _, _ in events} == wanted
    assert [i for i, *_ in events] == [i for i, t, *_ in every if t in wanted]


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


def _outcome(read: Any) -> Any:
    """What a read gives: its events' values, or the class and text of what it raised."""
    try:
        return _as_values(read())
    except Exception as e:
        return type(e), str(e)


@pytest.mark.parametrize(
    ("change", "reads"),
    [
        (b" %s\n", True),  # whitespace the JSON decoder skips
        (b"%s ", True),
        (b"[%s]", False),  # not an object
        (b"%s{}", False),  # extra data
    ],
)
def test_a_state_not_as_the_transcoder_wrote_it_reads_as_the_library_reads_it(
    world: World, change: bytes, reads: bool
) -> None:
    victim = world.execute(f"SELECT MAX({world.id_column}) FROM {{table}}")[0][0]
    state = world.execute(f"SELECT state FROM {{table}} WHERE {world.id_column} = ?", victim)[0][0]
    world.execute(
        f"UPDATE {{table}} SET state = ? WHERE {world.id_column} = ?", change % state, victim
    )
    library = _outcome(lambda: _library(world, victim - 1, 1))
    assert isinstance(library, list) == reads
    assert _outcome(lambda: log_scan(world.log)(victim - 1, 1)[0]) == library


def test_events_at_reads_the_positions_asked_as_the_library_does(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    head = world.log.recorder.max_notification_id()
    every = {i: e for i, _, e, _ in _library(world, 0, 10_000)}
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


def test_a_scan_keeping_rows_gives_every_row_and_decodes_only_the_wanted_topics(
    world: World,
) -> None:
    every, end, count = log_scan(world.log)(0, 10_000)
    wanted = frozenset({"tensorant.PodLaunched"})
    kept, kept_end, kept_count = log_scan(world.log, wanted, keep_rows=True)(0, 10_000)

    assert (kept_end, kept_count) == (end, count)
    assert [i for i, *_ in kept] == [i for i, *_ in every]  # every row, in log order
    stored = stored_log(world.log)
    assert stored is not None
    for (i, topic, event, row), (_, _, decoded, _) in zip(kept, every, strict=True):
        assert row is not None and row[0] == i and row[3] == topic
        assert _as_values([(i, topic, stored.decode(row))]) == _as_values([(i, topic, decoded)])
        assert (event is None) == (topic not in wanted)
        if event is not None:
            assert _as_values([(i, topic, event)]) == _as_values([(i, topic, decoded)])


def test_the_stored_state_of_every_event_is_its_decoded_state_in_canonical_json(
    world: World,
) -> None:
    """`StoredLog.state` (what the audit chain hashes in a rebuild): for every event of the
    log, the canonical text and the JSON values of the decoded event's state."""
    stored = stored_log(world.log)
    assert stored is not None
    rows, _, _ = log_scan(world.log, frozenset(), keep_rows=True)(0, 10_000)
    assert len(rows) > 40
    for _, _, _, row in rows:
        assert row is not None
        state = event_state(stored.decode(row))
        read = stored.state(row[4])
        assert read is not None, row[3]
        assert read[1] == canonical(state)
        assert read[0] == json.loads(canonical(state))


def test_only_a_log_of_the_library_json_transcoder_gives_stored_rows(world: World) -> None:
    assert stored_log(world.log) is not None
    key = AESCipher.create_key(16)
    ciphered = TensorantLog(
        dict(world.env, CIPHER_TOPIC="eventsourcing.cryptography:AESCipher", CIPHER_KEY=key)
    )
    try:
        assert stored_log(ciphered) is None
    finally:
        ciphered.close()
    compressed = TensorantLog(
        dict(world.env, COMPRESSOR_TOPIC="eventsourcing.compressor:ZlibCompressor")
    )
    try:
        assert stored_log(compressed) is None
    finally:
        compressed.close()
    popo: Application[Any] = Application(env={"PERSISTENCE_MODULE": "eventsourcing.popo"})
    assert stored_log(popo) is None
    with pytest.raises(ValueError, match="no stored rows"):
        log_scan(popo, keep_rows=True)
