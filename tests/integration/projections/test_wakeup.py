"""Wake-up: LISTEN/NOTIFY on PostgreSQL reacts well under the poll interval; SQLite polls."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from projections.store.engine import Projector
from projections.store.wakeup import PollWaker, SharedListenWaker, waker_for
from tests.integration.projections.conftest import World
from tests.unit.projections.toy import EventCount, ToyApp


def _seconds_until_applied(world: World, projector: Projector, poll_interval: float) -> float:
    stop = threading.Event()
    thread = threading.Thread(target=projector.run_forever, args=(stop, poll_interval))
    thread.start()
    try:
        world.app.start("org0", "warm-up")
        deadline = time.monotonic() + 10
        while world.store.position("event_count") < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.2)  # fixed-sleep-ok: the projector idles; the wake-up is timed
        started = time.monotonic()
        _, head = world.app.start("org0", "probe")
        while world.store.position("event_count") < head:
            assert time.monotonic() - started < poll_interval + 5, "never caught up"
            time.sleep(0.002)
        return time.monotonic() - started
    finally:
        stop.set()
        thread.join(10)


@pytest.mark.postgres
@pytest.mark.parametrize("world", ["postgres"], indirect=True)
def test_notify_wakes_the_projector_well_under_the_poll_interval(world: World) -> None:
    projector = Projector(world.app, world.store, EventCount())
    waker = waker_for(world.app)
    waker.close()
    assert isinstance(waker, SharedListenWaker)

    assert _seconds_until_applied(world, projector, poll_interval=5.0) < 0.5


@pytest.mark.parametrize("world", ["sqlite"], indirect=True)
def test_sqlite_projector_polls_at_the_poll_interval(world: World) -> None:
    projector = Projector(world.app, world.store, EventCount())
    waker = waker_for(world.app)
    waker.close()
    assert isinstance(waker, PollWaker)

    assert _seconds_until_applied(world, projector, poll_interval=0.1) < 1.0


def _listening_connections(world: World, channel: str) -> int:
    with world.app.recorder.datastore.pool.connection() as conn:  # type: ignore[attr-defined]
        row = conn.execute(
            "SELECT count(*) AS n FROM pg_stat_activity WHERE query = %s", (f'LISTEN "{channel}"',)
        ).fetchone()
    return int(row["n"])


@pytest.mark.postgres
@pytest.mark.parametrize("world", ["postgres"], indirect=True)
def test_every_follower_of_a_store_shares_one_listen_connection(world: World) -> None:
    """Nine views and a relay would hold ten LISTEN connections each: one per store per
    process instead; one commit wakes every follower, and the last to close releases it."""
    # An app of its own: the channel (the events table's unqualified name) is shared by every
    # ToyApp schema in the database, so another test's commit or listener would count here.
    alone = type(f"Shared{uuid.uuid4().hex[:8]}", (ToyApp,), {})(env=world.app.env)
    channel = alone.recorder.channel_name  # type: ignore[attr-defined]
    wakers = [waker_for(alone) for _ in range(5)]
    try:
        assert all(isinstance(w, SharedListenWaker) for w in wakers)
        assert len({w.listener for w in wakers}) == 1  # type: ignore[attr-defined]
        assert _listening_connections(world, channel) == 1
        stop = threading.Event()
        woken: list[bool] = []

        def wait(w: object) -> None:
            woken.append(w.wait(stop, 5.0))  # type: ignore[attr-defined]

        threads = [threading.Thread(target=wait, args=(w,)) for w in wakers]
        for t in threads:
            t.start()
        time.sleep(0.2)  # fixed-sleep-ok: the followers wait; the wake-up is timed
        started = time.monotonic()
        alone.start("org0", "one commit")
        for t in threads:
            t.join(10)
        assert woken == [True] * 5
        assert time.monotonic() - started < 2.0
        # Nothing new since: a follower's next wait times out rather than waking again.
        assert wakers[0].wait(stop, 0.3) is False
    finally:
        for w in wakers:
            w.close()
    try:
        deadline = time.monotonic() + 5
        while _listening_connections(world, channel) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _listening_connections(world, channel) == 0
    finally:
        alone.close()


def _idle_runs(projector: Projector, poll_interval: float, seconds: float) -> int:
    """How many batches an idle follower opens in `seconds`."""
    runs = 0
    run_once = projector.run_once

    def counted() -> int:
        nonlocal runs
        runs += 1
        return run_once()

    projector.run_once = counted  # type: ignore[method-assign]
    stop = threading.Event()
    thread = threading.Thread(target=projector.run_forever, args=(stop, poll_interval))
    thread.start()
    time.sleep(seconds)
    stop.set()
    thread.join(5)
    return runs


@pytest.mark.postgres
@pytest.mark.parametrize("world", ["postgres"], indirect=True)
def test_an_idle_follower_of_a_notifying_store_polls_only_as_a_safety_net(world: World) -> None:
    """NOTIFY wakes it (test above); the poll is a safety net of NOTIFY_SAFETY_NET seconds, not
    the poll interval: nine idle projectors polling every 0.5 s cost an idle serve ~110 ms CPU/s."""
    # eventsourcing's NOTIFY channel is the events table's unqualified name ("toyapp_events"),
    # shared by every ToyApp schema in the database: an app of its own hears no other test.
    alone = type(f"Idle{uuid.uuid4().hex[:8]}", (ToyApp,), {})(env=world.app.env)
    try:
        projector = Projector(alone, world.store, EventCount())
        assert _idle_runs(projector, poll_interval=0.1, seconds=1.0) == 1
    finally:
        alone.close()


@pytest.mark.parametrize("world", ["sqlite"], indirect=True)
def test_an_idle_sqlite_follower_still_polls_at_the_poll_interval(world: World) -> None:
    projector = Projector(world.app, world.store, EventCount())
    assert _idle_runs(projector, poll_interval=0.1, seconds=1.0) >= 5
