"""How an idle projector learns that new events were recorded.

PostgreSQL: eventsourcing 9.5's `PostgresApplicationRecorder` runs `NOTIFY <channel>` inside
every transaction that inserts events (`channel_name` is the events table name with dots
replaced), so the notification is delivered when the events commit. We LISTEN on that channel
with a dedicated connection (not one from the application's pool, which may hold one connection),
ONE per event store per process: every follower of that store (nine views, the outbox relay)
waits on the same listener, so a deployment holds one LISTEN connection, not one per follower.
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

# On a store that notifies, the poll is only a safety net (a NOTIFY wakes a follower within
# milliseconds, a reconnect counts as a wake-up): polling it every 0.5 s made nine idle
# projectors open eighteen view batches a second (~110 ms CPU/s of an idle `serve`).
NOTIFY_SAFETY_NET = 5.0


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


class _Listener:
    """One LISTEN connection and a thread that counts its notifications, shared by every
    `SharedListenWaker` of one event store in this process (reference-counted)."""

    def __init__(self, key: tuple[str, ...], connect_kwargs: dict[str, Any], channel: str) -> None:
        self.key = key
        self.users = 0
        self.generation = 0  # notifications (or reconnects) seen so far
        self.changed = threading.Condition()
        self._stop = threading.Event()
        self._listen = ListenWaker(connect_kwargs, channel)  # LISTENing before any user reads
        self._thread = threading.Thread(target=self._loop, daemon=True, name=f"listen:{channel}")
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self._listen.wait(self._stop, 1.0):
                with self.changed:
                    self.generation += 1
                    self.changed.notify_all()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._listen.close()


_LISTENERS: dict[tuple[str, ...], _Listener] = {}
_LISTENERS_LOCK = threading.Lock()


class SharedListenWaker:
    """A follower's view of its store's shared listener: woken by any notification since its
    previous wake-up (or since it was made, which is after the LISTEN: no commit is missed)."""

    def __init__(self, listener: _Listener) -> None:
        self.listener = listener
        with listener.changed:
            self._seen = listener.generation
        self._closed = False

    def wait(self, stop: threading.Event, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        changed = self.listener.changed
        with changed:
            while self.listener.generation == self._seen:
                remaining = deadline - time.monotonic()
                if stop.is_set() or remaining <= 0:
                    return False
                changed.wait(min(_STOP_CHECK, remaining))
            self._seen = self.listener.generation
            return True

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with _LISTENERS_LOCK:
            self.listener.users -= 1
            last = self.listener.users == 0
            if last:
                del _LISTENERS[self.listener.key]
        if last:
            self.listener.close()


def _shared_waker(connect_kwargs: dict[str, Any], channel: str) -> SharedListenWaker:
    key = (channel, *(f"{k}={connect_kwargs[k]}" for k in sorted(connect_kwargs)))
    with _LISTENERS_LOCK:
        listener = _LISTENERS.get(key)
        if listener is None:
            listener = _LISTENERS[key] = _Listener(key, connect_kwargs, channel)
        listener.users += 1
    return SharedListenWaker(listener)


def poll_timeout(waker: Waker, poll_interval: float) -> float:
    """How long a follower waits between runs: `poll_interval` where polling is the only
    wake-up, at least `NOTIFY_SAFETY_NET` where notifications wake it."""
    if isinstance(waker, SharedListenWaker | ListenWaker):
        return max(poll_interval, NOTIFY_SAFETY_NET)
    return poll_interval


def waker_for(app: Application[Any]) -> Waker:
    """LISTEN/NOTIFY for the PostgreSQL event store (one connection per store per process),
    polling otherwise."""
    recorder = app.recorder
    if isinstance(recorder, PostgresApplicationRecorder):
        pool = recorder.datastore.pool
        raw = pool.kwargs() if callable(pool.kwargs) else pool.kwargs
        kwargs = {k: v for k, v in (raw or {}).items() if k != "row_factory"}
        if pool.get_password_func is not None:
            kwargs["password"] = pool.get_password_func()
        return _shared_waker(kwargs, recorder.channel_name)
    return PollWaker()
