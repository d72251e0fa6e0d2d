"""How an idle projector learns that new events were recorded.

PostgreSQL: eventsourcing 9.5's `PostgresApplicationRecorder` runs `NOTIFY <channel>` inside
every transaction that inserts events (`channel_name` is the events table name with dots
replaced), so the notification is delivered when the events commit. We LISTEN on that channel
with a dedicated connection (not one from the application's pool, which may hold one connection).
We still poll every `poll_interval` as a safety net (e.g. after a reconnect).

SQLite has no notifications: the projector polls every `poll_interval`.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Protocol

import psycopg
from eventsourcing.application import Application
from eventsourcing.postgres import PostgresApplicationRecorder
from psycopg.sql import SQL, Identifier

log = logging.getLogger(__name__)

# Upper bound on how long a wait blocks before re-checking the stop flag.
_STOP_CHECK = 0.1


class Waker(Protocol):
    """Blocks until new events may be available, `stop` is set, or `timeout` passes."""

    def wait(self, stop: threading.Event, timeout: float) -> bool:
        """True when woken by a notification rather than by the timeout."""
        ...

    def close(self) -> None:
        """Release resources."""
        ...


class PollWaker:
    """Wakes after `timeout` (SQLite and any recorder that does not notify)."""

    def wait(self, stop: threading.Event, timeout: float) -> bool:
        stop.wait(timeout)
        return False

    def close(self) -> None:
        """Nothing to release."""


class ListenWaker:
    """LISTENs on the event store's NOTIFY channel with a connection of its own."""

    def __init__(self, connect_kwargs: dict[str, Any], channel: str) -> None:
        self._kwargs = connect_kwargs
        self.channel = channel
        self._conn: psycopg.Connection[Any] | None = None
        self._connect()

    def _connect(self) -> None:
        self._conn = psycopg.connect(**self._kwargs, autocommit=True)
        self._conn.execute(SQL("LISTEN {}").format(Identifier(self.channel)))

    def wait(self, stop: threading.Event, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            try:
                if self._conn is None:
                    self._connect()
                    return True  # events may have been missed while disconnected
                assert self._conn is not None
                # The generator holds the connection's lock until it finishes: let it finish
                # (stop_after=1) before draining the rest, or the second call deadlocks.
                got = list(self._conn.notifies(timeout=min(_STOP_CHECK, remaining), stop_after=1))
                if got:
                    # Drain whatever else already arrived: one run catches up on all of it.
                    list(self._conn.notifies(timeout=0))
                    return True
            except psycopg.OperationalError:
                log.warning("LISTEN connection lost; polling until it reconnects", exc_info=True)
                self.close()
                stop.wait(min(remaining, 1.0))
        return False

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def waker_for(app: Application[Any]) -> Waker:
    """LISTEN/NOTIFY for the PostgreSQL event store, polling otherwise."""
    recorder = app.recorder
    if isinstance(recorder, PostgresApplicationRecorder):
        pool = recorder.datastore.pool
        raw = pool.kwargs() if callable(pool.kwargs) else pool.kwargs
        kwargs = {k: v for k, v in (raw or {}).items() if k != "row_factory"}
        if pool.get_password_func is not None:
            kwargs["password"] = pool.get_password_func()
        return ListenWaker(kwargs, recorder.channel_name)
    return PollWaker()
