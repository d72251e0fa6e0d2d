"""Reactions on the embedded default (O1, R5): SQLite event store, in-process broker and worker."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import pytest
from dramatiq.brokers.stub import StubBroker

from adapters.broker import (
    EmbeddedWorker,
    is_embedded,
    make_broker,
    message_id,
    register_actors,
    run_worker,
)
from adapters.broker_dedupe import MemoryDedupe
from domain.errors import NotFound
from projections.store.sqlite import SQLiteViewStore
from tests.unit.broker import scenarios as s


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[s.Rig]:
    app = s.EventsApp(
        env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "e.db")}
    )
    store = SQLiteViewStore(str(tmp_path / "views.db"))
    log = s.DriveLog()
    dedupe = s.CountingDedupe(MemoryDedupe())
    actors = register_actors(make_broker(None), log, dedupe=dedupe, queue_name="tensorant")
    worker = EmbeddedWorker(actors, threads=2)
    rig = s.Rig(app, store, actors, dedupe, log, worker.start)
    yield rig
    for relay in rig.relays:
        relay.stop()
    worker.stop()
    store.close()
    app.close()


def test_a_committed_run_event_reaches_the_actor_through_the_relay(rig: s.Rig) -> None:
    s.committed_run_event_reaches_the_actor(rig)


def test_a_message_delivered_twice_drives_the_run_once(rig: s.Rig) -> None:
    s.message_delivered_twice_drives_once(rig)


def test_the_relay_resumes_from_its_tracking_position_after_a_crash(rig: s.Rig) -> None:
    s.relay_resumes_from_its_tracking_position(rig)


def test_a_failed_drive_is_retried_and_not_blocked_by_the_dedupe() -> None:
    log = s.DriveLog(fail_first=1)
    actors = register_actors(StubBroker(), log, min_backoff=10, max_backoff=20)
    run_id = str(uuid4())
    with EmbeddedWorker(actors, threads=1):
        actors.send_drive(run_id, 3)
        assert log.wait_for(lambda calls: calls == [run_id])


def test_a_drive_refused_by_the_domain_is_not_retried() -> None:
    attempts: list[str] = []

    def drive(run_id: str) -> None:
        attempts.append(run_id)
        raise NotFound(f"run {run_id} not found")

    actors = register_actors(StubBroker(), drive, min_backoff=10, max_backoff=20)
    with EmbeddedWorker(actors, threads=1):
        actors.send_drive("r1", 1)
        stub = actors.broker
        assert isinstance(stub, StubBroker)
        stub.join(actors.queue_name, timeout=5000, fail_fast=False)
    assert attempts == ["r1"]
    assert len(stub.dead_letters) == 1


def test_reconcile_ticks_run_once_per_slot() -> None:
    ticks: list[int] = []
    done = threading.Event()

    def reconcile(shard: int, shards: int) -> None:
        ticks.append(1)
        done.set()

    actors = register_actors(StubBroker(), s.DriveLog(), reconcile=reconcile)
    with EmbeddedWorker(actors, threads=1):
        actors.send_reconcile(100)
        actors.send_reconcile(100)
        assert done.wait(5)
        actors.broker.join(actors.queue_name, timeout=5000)
    assert ticks == [1]


def test_a_sharded_tick_runs_each_shard_once_per_slot() -> None:
    """K2 at scale: `reconcile_shards` messages per slot, each its own share, each once."""
    ran: list[tuple[int, int]] = []

    def reconcile(shard: int, shards: int) -> None:
        ran.append((shard, shards))

    actors = register_actors(StubBroker(), s.DriveLog(), reconcile=reconcile)
    with EmbeddedWorker(actors, threads=2):
        actors.send_reconcile(100, 3)
        actors.send_reconcile(100, 3)
        actors.send_reconcile(101, 3)
        actors.broker.join(actors.queue_name, timeout=5000)
    assert sorted(ran) == sorted([(0, 3), (1, 3), (2, 3)] * 2)


def test_several_brokers_live_side_by_side_in_one_process() -> None:
    a = register_actors(make_broker("memory://"), s.DriveLog())
    b = register_actors(make_broker(""), s.DriveLog())
    assert a.drive_run.broker is a.broker
    assert b.drive_run.broker is b.broker
    assert a.broker is not b.broker


def test_broker_urls_pick_the_broker_kind() -> None:
    assert is_embedded(None)
    assert is_embedded("memory://")
    assert type(make_broker("amqp://guest:guest@127.0.0.1:5672/")).__name__ == "RabbitmqBroker"
    assert type(make_broker("redis://127.0.0.1:6379/0")).__name__ == "RedisBroker"
    with pytest.raises(ValueError, match="unsupported broker URL scheme 'kafka'"):
        make_broker("kafka://secret@host")


def test_message_ids_are_deterministic_per_event() -> None:
    assert message_id("drive_run", "r1", 5) == message_id("drive_run", "r1", 5)
    assert message_id("drive_run", "r1", 5) != message_id("drive_run", "r1", 6)
    assert message_id("drive_run", "r1", 5) != message_id("drive_run", "r2", 5)


def test_the_memory_dedupe_is_bounded() -> None:
    d = MemoryDedupe(max_entries=2)
    assert d.claim(("a", 1))
    assert not d.claim(("a", 1))
    assert d.claim(("b", 1))
    assert d.claim(("c", 1))  # evicts ("a", 1): forgetting costs one extra drive, nothing more
    assert d.claim(("a", 1))
    d.release(("a", 1))
    assert d.claim(("a", 1))


def test_a_worker_process_needs_a_broker_url() -> None:
    with pytest.raises(ValueError, match="TENSORANT_BROKER_URL"):
        run_worker(None, s.DriveLog())
