"""The outbox relay: the event store's notification log -> `drive_run` messages on the broker.

A projection among the projections: it follows the log with the projection engine and writes no
documents; the broker it sends to (`adapters.broker.Actors`) is handed in as a `DriveSender`.

Commands never enqueue (that would be a dual write: an event saved without its message, or a
message about an event that was rolled back). Instead the relay is a projection named `outbox`
run by the projection engine: it follows the notification log from its tracking position and,
for every Run event, enqueues `drive_run(run_id, notification_id)` inside the batch, before the
batch commits the new position. A crash between enqueue and commit re-sends the same messages
(same deterministic message ids) on restart: at-least-once, and duplicates are harmless because
actors dedupe on the event's identity and `drive_run` is idempotent on the Run's state.

Where it runs:
- embedded default (`tensorant serve` without TENSORANT_BROKER_URL): a `Relay` thread in the
  serve process, next to the in-process broker's `EmbeddedWorker`;
- scale-out (amqp:// or redis://): inside every `tensorant projector` process. Copies are safe:
  the engine holds the `outbox` view's lock per batch, so one copy relays while others wait.
It is deliberately NOT in the API's read-your-writes projection set, so API processes never
touch the broker. Never rebuild it: a rebuild re-sends every Run event ever recorded (harmless,
but a burst of work). On PostgreSQL it wakes on the event store's NOTIFY; on SQLite it polls.
The clock's messages (`reconcile_tick`) are the tickers' (`entrypoints.tickers`).
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

from eventsourcing.application import Application
from eventsourcing.domain import DomainEventProtocol

from domain.run import Run
from projections.store.base import ViewBatch, ViewStore
from projections.store.engine import Projector

OUTBOX = "outbox"


class DriveSender(Protocol):
    """What the relay needs of `Actors`: enqueue `drive_run` for one event."""

    def send_drive(self, run_id: str, notification_id: int) -> Any: ...


class OutboxRelay:
    """The `outbox` projection: one `drive_run` message per Run event; no documents."""

    name = OUTBOX

    def __init__(self, actors: DriveSender) -> None:
        self.actors = actors

    def apply(self, batch: ViewBatch, event: DomainEventProtocol[Any], position: int) -> None:
        if isinstance(event, Run.Event):
            self.actors.send_drive(str(event.originator_id), position)


class Relay:
    """Runs the `outbox` projector on a thread: start/stop."""

    def __init__(
        self,
        app: Application[Any],
        store: ViewStore,
        actors: DriveSender,
        *,
        poll_interval: float = 0.5,
        batch_size: int = 200,
    ) -> None:
        """`poll_interval` is the safety-net poll (the only wake-up on SQLite)."""
        self.actors = actors
        self.projector = Projector(app, store, OutboxRelay(actors), batch_size=batch_size)
        self.poll_interval = poll_interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def position(self) -> int:
        """The notification id of the last event relayed."""
        return self.projector.position()

    def run_once(self) -> int:
        """Relay everything recorded so far; returns the number of events read."""
        return self.projector.run_once()

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(
            target=self.projector.run_forever,
            args=(self._stop, self.poll_interval),
            name="relay:outbox",
            daemon=True,
        )
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._thread = None

    def __enter__(self) -> Relay:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
