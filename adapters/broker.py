"""Dramatiq brokers and the reaction actors (R5, K2; docs/architecture.md, The reactor).

Every message means "drive this run" (or "reconcile now") and carries ids only, never secrets:
`drive_run(run_id, notification_id)`. Messages get a deterministic id from what caused them,
so the relay re-sending after a crash produces the same message, and the actor skips a
(run id, notification id) it already handled. That dedupe is an optimisation: `drive` is
level-triggered and idempotent on the aggregate's state, so a message handled twice changes
nothing either way.

Brokers: `None`/`""`/`memory://` -> an in-process `StubBroker` run by `EmbeddedWorker` (inside
`tensorant serve`); `amqp://...` -> RabbitMQ; `redis://...` -> Redis, consumed by
`tensorant worker` processes (`run_worker`). Actors are bound to an explicit broker through
`register_actors`, never dramatiq's global broker, so several brokers can live in one process.
"""

from __future__ import annotations

import logging
import signal
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType
from typing import Any

import dramatiq
from dramatiq.brokers.stub import StubBroker

from adapters.broker_dedupe import Dedupe, MemoryDedupe
from domain.errors import DomainError

log = logging.getLogger("tensorant.broker")

QUEUE = "tensorant"
DRIVE_RUN = "drive_run"
RECONCILE = "reconcile_tick"
_RECONCILE_KEY = "__reconcile__"
# Deterministic message ids live in their own UUID namespace.
_MESSAGE_NS = uuid.uuid5(uuid.NAMESPACE_URL, "https://tensorant.dev/messages")

Drive = Callable[[str], None]
Reconcile = Callable[[int, int], None]  # (shard, shards): a share of the organizations


def is_embedded(url: str | None) -> bool:
    """True for the in-process broker (no URL, or `memory://`)."""
    return not url or url.startswith("memory://")


def make_broker(url: str | None) -> dramatiq.Broker:
    """A broker for the URL; the in-process default when it is empty or `memory://`."""
    if is_embedded(url):
        return StubBroker()
    assert url is not None
    if url.startswith(("amqp://", "amqps://")):
        from dramatiq.brokers.rabbitmq import RabbitmqBroker

        return RabbitmqBroker(url=url)
    if url.startswith(("redis://", "rediss://", "unix://")):
        from dramatiq.brokers.redis import RedisBroker

        return RedisBroker(url=url)  # type: ignore[no-untyped-call]
    scheme = url.split(":", 1)[0]
    msg = f"unsupported broker URL scheme {scheme!r} (use amqp://, redis:// or none)"
    raise ValueError(msg)


def message_id(kind: str, key: str, seq: int) -> str:
    """The deterministic id of the message caused by (kind, key, seq)."""
    return str(uuid.uuid5(_MESSAGE_NS, f"{kind}:{key}:{seq}"))


@dataclass
class Actors:
    """The actors declared on one broker, and how to send them messages."""

    broker: dramatiq.Broker
    queue_name: str
    drive_run: dramatiq.Actor[..., None]
    reconcile: dramatiq.Actor[..., None]
    dedupe: Dedupe

    def send_drive(self, run_id: str, notification_id: int) -> dramatiq.Message[None]:
        """Enqueue `drive_run` for the event at `notification_id` (same event, same message id)."""
        message = self.drive_run.message(run_id, notification_id).copy(
            message_id=message_id(DRIVE_RUN, run_id, notification_id)
        )
        return self.broker.enqueue(message)

    def send_reconcile(self, slot: int, shards: int = 1) -> list[dramatiq.Message[None]]:
        """Enqueue `reconcile_tick` for a time slot (one message id per slot and shard across
        relays): `shards` messages, each for a share of the organizations (K2 at scale), so
        the workers take one tick's pass between them."""
        sent = []
        for shard in range(shards):
            key = "" if shards == 1 else f"{shard}/{shards}"
            message = self.reconcile.message(slot, shard, shards).copy(
                message_id=message_id(RECONCILE, key, slot)
            )
            sent.append(self.broker.enqueue(message))
        return sent

    def purge(self) -> None:
        """Drop every queued message of our queue (tests and operators' resets)."""
        self.broker.flush(self.queue_name)


def _once(dedupe: Dedupe, key: tuple[str, int], effect: Callable[[], None]) -> bool:
    """Run `effect` unless `key` was handled; a failure releases the key so a retry runs it."""
    if not dedupe.claim(key):
        log.debug("skipping %s: already handled", key)
        return False
    try:
        effect()
    except BaseException:
        dedupe.release(key)
        raise
    return True


def register_actors(
    broker: dramatiq.Broker,
    drive: Drive,
    *,
    reconcile: Reconcile | None = None,
    queue_name: str = QUEUE,
    dedupe: Dedupe | None = None,
    max_retries: int = 8,
    min_backoff: int = 1_000,
    max_backoff: int = 60_000,
    time_limit: int = 600_000,
    no_retry: tuple[type[BaseException], ...] = (DomainError,),
) -> Actors:
    """Declare `drive_run` and `reconcile_tick` on `broker` (backoffs and limits in ms).

    Errors in `no_retry` (a run not found, an illegal transition) cannot heal by retrying; the
    periodic reconcile drives the run again anyway. Anything else is retried with backoff.
    """
    seen = dedupe if dedupe is not None else MemoryDedupe()

    def drive_run(run_id: str, notification_id: int | None = None) -> None:
        if notification_id is None:
            drive(run_id)
            return
        _once(seen, (run_id, int(notification_id)), lambda: drive(run_id))

    def reconcile_tick(slot: int, shard: int = 0, shards: int = 1) -> None:
        if reconcile is None:
            return
        key = _RECONCILE_KEY if shards == 1 else f"{_RECONCILE_KEY}{shard}/{shards}"
        _once(seen, (key, int(slot)), lambda: reconcile(shard, shards))

    options: dict[str, Any] = {
        "broker": broker,
        "queue_name": queue_name,
        "max_retries": max_retries,
        "min_backoff": min_backoff,
        "max_backoff": max_backoff,
        "time_limit": time_limit,
        "throws": no_retry,
    }
    return Actors(
        broker=broker,
        queue_name=queue_name,
        drive_run=dramatiq.actor(actor_name=DRIVE_RUN, **options)(drive_run),
        reconcile=dramatiq.actor(actor_name=RECONCILE, **options)(reconcile_tick),
        dedupe=seen,
    )


class EmbeddedWorker:
    """A dramatiq Worker on `actors`' queue inside this process (start/stop, or a `with` block)."""

    def __init__(self, actors: Actors, *, threads: int = 4, worker_timeout: int = 100) -> None:
        """`worker_timeout` (ms) bounds how long idle consumers block, hence how fast stop is."""
        self.actors = actors
        self._threads = threads
        self._timeout = worker_timeout
        self._worker: dramatiq.Worker | None = None

    def start(self) -> None:
        if self._worker is not None:
            return
        self._worker = dramatiq.Worker(
            self.actors.broker,
            queues={self.actors.queue_name},
            worker_threads=self._threads,
            worker_timeout=self._timeout,
        )
        self._worker.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Stop consuming and wait (bounded) for running actors; unacked messages are requeued."""
        if self._worker is None:
            return
        self._worker.stop(timeout=int(timeout * 1000))
        self._worker = None

    def __enter__(self) -> EmbeddedWorker:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def run_worker(
    url: str | None,
    drive: Drive,
    *,
    reconcile: Reconcile | None = None,
    dedupe: Dedupe | None = None,
    queue_name: str = QUEUE,
    threads: int = 8,
    stop: threading.Event | None = None,
) -> None:
    """`tensorant worker`: consume until SIGTERM/SIGINT (or `stop`), then finish running actors.

    Signal handlers are installed only when called from the main thread; tests pass `stop`.
    """
    if is_embedded(url):
        msg = "the in-process broker runs inside `tensorant serve`; set TENSORANT_BROKER_URL"
        raise ValueError(msg)
    stop = stop or threading.Event()
    broker = make_broker(url)
    actors = register_actors(
        broker, drive, reconcile=reconcile, queue_name=queue_name, dedupe=dedupe
    )
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():

        def _on_signal(signum: int, _frame: FrameType | None) -> None:
            log.info("worker got signal %d; stopping after running actors finish", signum)
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            previous[sig] = signal.signal(sig, _on_signal)
    worker = EmbeddedWorker(actors, threads=threads, worker_timeout=1000)
    worker.start()
    log.info("worker consuming %r on %s", queue_name, type(broker).__name__)
    try:
        stop.wait()
    finally:
        worker.stop(timeout=30.0)
        broker.close()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
