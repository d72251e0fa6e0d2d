"""Test bodies shared by the in-process, RabbitMQ and Redis broker suites, and their fakes."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from uuid import UUID, uuid4

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate

from adapters.broker import Actors
from adapters.broker_dedupe import Dedupe, Key
from domain.run import Run
from projections.relay import OutboxRelay, Relay
from projections.store.base import ViewStore
from projections.store.engine import Projector
from tests.builders import small_trial

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
CONFIG = small_trial()
WAIT = 10.0


class Note(Aggregate):
    """An aggregate that is not a Run: the relay must not send anything for it."""

    @classmethod
    def write(cls) -> Note:
        return cls._create(cls.Created)


class EventsApp(Application[UUID]):
    """A bare application: the relay only needs its recorder and mapper."""

    name = "relaytest"


def new_run() -> Run:
    return Run.draft("org-1", CONFIG, "u", T0)


class DriveLog:
    """The stand-in for `Reactor.drive_run`: records each run id it is driven with."""

    def __init__(self, fail_first: int = 0) -> None:
        self.calls: list[str] = []
        self._fail = fail_first
        self._cv = threading.Condition()

    def __call__(self, run_id: str) -> None:
        with self._cv:
            if self._fail > 0:
                self._fail -= 1
                msg = "provider unavailable"
                raise RuntimeError(msg)
            self.calls.append(run_id)
            self._cv.notify_all()

    def wait_for(self, done: Callable[[list[str]], bool], timeout: float = WAIT) -> bool:
        with self._cv:
            return self._cv.wait_for(lambda: done(self.calls), timeout)


class CountingDedupe:
    """Wraps a dedupe and counts every claim attempt, i.e. every delivery the actor saw."""

    def __init__(self, inner: Dedupe) -> None:
        self.inner = inner
        self.attempts: Counter[Key] = Counter()
        self.decided: Counter[Key] = Counter()  # claims answered
        self.granted: Counter[Key] = Counter()  # claims answered yes: each allows one drive
        self._lock = threading.Lock()

    def claim(self, key: Key) -> bool:
        with self._lock:
            self.attempts[key] += 1
        granted = self.inner.claim(key)
        with self._lock:
            self.decided[key] += 1
            self.granted[key] += granted
        return granted

    def release(self, key: Key) -> None:
        self.inner.release(key)

    def wait_attempts(self, key: Key, n: int, timeout: float = WAIT) -> bool:
        return self._wait(self.attempts, key, n, timeout)

    def wait_decided(self, key: Key, n: int, timeout: float = WAIT) -> bool:
        """Until `n` deliveries of `key` were claimed and answered (a drive follows only a
        claim answered yes, so after this the drives they allow are known: `granted`)."""
        return self._wait(self.decided, key, n, timeout)

    def _wait(self, counts: Counter[Key], key: Key, n: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if counts[key] >= n:
                    return True
            time.sleep(0.02)
        return False


class FlakySender:
    """Delegates `send_drive` but raises on the n-th call: a relay crash mid-batch."""

    def __init__(self, actors: Actors, fail_on: int) -> None:
        self.actors = actors
        self.fail_on = fail_on
        self.sent = 0

    def send_drive(self, run_id: str, notification_id: int) -> Any:
        self.sent += 1
        if self.sent == self.fail_on:
            msg = "broker connection lost"
            raise ConnectionError(msg)
        return self.actors.send_drive(run_id, notification_id)


@dataclass
class Rig:
    """An event store, a view store, a producer's actors and a consumer on one broker kind."""

    app: EventsApp
    store: ViewStore
    producer: Actors
    dedupe: CountingDedupe
    log: DriveLog
    start_consumer: Callable[[], None]
    relays: list[Relay] = field(default_factory=list)

    def new_relay(self) -> Relay:
        relay = Relay(self.app, self.store, self.producer, poll_interval=0.05)
        self.relays.append(relay)
        return relay


# ------------------------------------------------------------------ scenarios
def committed_run_event_reaches_the_actor(rig: Rig) -> None:
    rig.start_consumer()
    relay = rig.new_relay()
    relay.start()
    run = new_run()
    rig.app.save(run, Note.write())
    run_id = str(run.id)
    assert rig.log.wait_for(lambda calls: run_id in calls), "drive_run never ran"
    relay.stop()
    assert rig.log.calls == [run_id]  # the Note's event sent nothing
    assert relay.position() == rig.app.recorder.max_notification_id()


def message_delivered_twice_drives_once(rig: Rig) -> None:
    rig.start_consumer()
    run_id = str(uuid4())
    first = rig.producer.send_drive(run_id, 7)
    second = rig.producer.send_drive(run_id, 7)
    assert first.message_id == second.message_id
    assert first.args == (run_id, 7)  # ids only
    arrived_twice = rig.dedupe.wait_decided((run_id, 7), 2)
    # Redis keeps messages in a hash keyed by message id: when the first copy is acked before
    # the second id is fetched, the broker itself drops the duplicate. Either way: one drive.
    is_redis = type(rig.producer.broker).__name__ == "RedisBroker"
    assert arrived_twice or (is_redis and rig.dedupe.wait_decided((run_id, 7), 1)), (
        "the second delivery never arrived"
    )
    # Every delivery's claim is answered, and a drive follows only a yes: one yes, one drive.
    assert rig.dedupe.granted[(run_id, 7)] == 1
    assert rig.log.wait_for(lambda calls: run_id in calls), "drive_run never ran"
    assert rig.log.calls == [run_id]


def relay_resumes_from_its_tracking_position(rig: Rig) -> None:
    early = [new_run() for _ in range(3)]
    rig.app.save(*early)
    assert rig.new_relay().run_once() == 3
    mark = rig.app.recorder.max_notification_id()

    late = [new_run() for _ in range(3)]
    rig.app.save(late[0], Note.write())
    rig.app.save(*late[1:])
    crashing = Projector(rig.app, rig.store, OutboxRelay(FlakySender(rig.producer, fail_on=2)))
    try:
        crashing.run_once()
        raise AssertionError("the relay should have crashed")
    except ConnectionError:
        pass
    # The first late event was enqueued, but the batch's position did not commit.
    assert crashing.position() == mark

    restarted = rig.new_relay()  # a new process: nothing but the stored position
    restarted.run_once()
    assert restarted.position() == rig.app.recorder.max_notification_id()

    rig.start_consumer()
    ids = [str(r.id) for r in early + late]
    assert rig.log.wait_for(lambda calls: set(ids) <= set(calls)), "an event was skipped"
    # The re-sent duplicate of late[0]: its claim answered, no (Redis may drop it unsent).
    [resent] = [key for key in rig.dedupe.attempts if key[0] == str(late[0].id)]
    is_redis = type(rig.producer.broker).__name__ == "RedisBroker"
    assert rig.dedupe.wait_decided(resent, 2) or is_redis, "the re-sent copy never arrived"
    assert all(n == 1 for n in rig.dedupe.granted.values())
    assert Counter(rig.log.calls) == dict.fromkeys(ids, 1)
