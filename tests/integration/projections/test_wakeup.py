"""Wake-up: LISTEN/NOTIFY on PostgreSQL reacts well under the poll interval; SQLite polls."""

from __future__ import annotations

import threading
import time

import pytest

from projections.store.engine import Projector
from projections.store.wakeup import ListenWaker, PollWaker, waker_for
from tests.integration.projections.conftest import World
from tests.unit.projections.toy import EventCount


def _seconds_until_applied(world: World, projector: Projector, poll_interval: float) -> float:
    stop = threading.Event()
    thread = threading.Thread(target=projector.run_forever, args=(stop, poll_interval))
    thread.start()
    try:
        world.app.start("org0", "warm-up")
        deadline = time.monotonic() + 10
        while world.store.position("event_count") < 1 and time.monotonic() < deadline:
            time.sleep(0.005)
        time.sleep(0.2)  # let the projector go idle, waiting for the next wake-up
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
    assert isinstance(waker, ListenWaker)

    assert _seconds_until_applied(world, projector, poll_interval=5.0) < 0.5


@pytest.mark.parametrize("world", ["sqlite"], indirect=True)
def test_sqlite_projector_polls_at_the_poll_interval(world: World) -> None:
    projector = Projector(world.app, world.store, EventCount())
    waker = waker_for(world.app)
    waker.close()
    assert isinstance(waker, PollWaker)

    assert _seconds_until_applied(world, projector, poll_interval=0.1) < 1.0
