"""Per-run mutual exclusion across worker processes: PostgreSQL advisory locks."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg


class PostgresRunLocks:
    """Per-run exclusion, held for one drive: a session-level advisory lock on the run id,
    taken with `pg_try_advisory_lock` on one connection the process's holders share (K2 at
    scale: a blocking `pg_advisory_lock` needs a connection per waiting holder, so eight
    reconcile threads and the actor threads queued for a pool of two, and at a thousand
    organizations drives failed with "couldn't get a connection after 30 s"). A lock held by
    another process is tried again with a short backoff; within this process holders of one
    run queue on a lock of their own, since a session re-takes a lock it holds. A lost session
    drops its locks with it: the saves that follow are still guarded by the log's versions."""

    RETRY_MIN_S, RETRY_MAX_S = 0.005, 0.2

    def __init__(self, conninfo: str, max_size: int = 8) -> None:
        del max_size  # one connection whatever the holders: kept for the callers' signature
        self.conninfo = conninfo
        self._guard = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._local: dict[str, list[Any]] = {}  # name -> [its lock, holders and waiters]

    @contextmanager
    def hold(self, run_id: str) -> Iterator[None]:
        name = f"run:{run_id}"
        local = self._enter(name)
        try:
            conn = self._take(name)
            try:
                yield
            finally:
                self._give_back(conn, name)
        finally:
            self._leave(name, local)

    def close(self) -> None:
        with self._guard:
            if self._conn is not None:
                with suppress(psycopg.Error):
                    self._conn.close()
            self._conn = None

    def _enter(self, name: str) -> threading.Lock:
        with self._guard:
            entry = self._local.setdefault(name, [threading.Lock(), 0])
            entry[1] += 1
        lock: threading.Lock = entry[0]
        lock.acquire()
        return lock

    def _leave(self, name: str, lock: threading.Lock) -> None:
        lock.release()
        with self._guard:
            entry = self._local[name]
            entry[1] -= 1
            if entry[1] == 0:
                del self._local[name]

    def _take(self, name: str) -> psycopg.Connection[Any]:
        wait = self.RETRY_MIN_S
        while True:
            with self._guard:
                conn = self._session()
                taken = _try_lock(conn, name, 7)
            if taken:
                return conn
            time.sleep(wait)  # another process drives the run now
            wait = min(wait * 2, self.RETRY_MAX_S)

    def _give_back(self, conn: psycopg.Connection[Any], name: str) -> None:
        with self._guard:
            if conn is not self._conn:
                return  # its session is gone, and the lock with it
            with suppress(psycopg.Error):
                conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 7))", (name,))

    def _session(self) -> psycopg.Connection[Any]:
        self._conn = _live_session(self._conn, self.conninfo)
        return self._conn


class PostgresLease:
    """A session-level advisory lock on the process's lease connection: it ends with the
    session, so a worker killed with SIGKILL frees it as soon as PostgreSQL notices the dropped
    socket."""

    def __init__(self, owner: PostgresLeases, conn: psycopg.Connection[Any], key: str) -> None:
        self._owner = owner
        self._conn = conn
        self._key = key

    def release(self) -> None:
        self._owner._release(self._conn, self._key)


class PostgresLeases:
    """Every lease of a process on one connection: session-level advisory locks stack on one
    session, so a worker following hundreds of Pod logs holds one connection, not one per run
    (the scale bench met PostgreSQL's max_connections at ~100 followed runs when each lease
    had its own). A session re-takes its own lock, so the names held are also kept here."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._guard = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        self._held: set[str] = set()

    def _connection(self) -> psycopg.Connection[Any]:
        conn = _live_session(self._conn, self.conninfo)
        if conn is not self._conn:
            # A new session holds nothing: leases of the lost one are free for any worker.
            self._held.clear()
            self._conn = conn
        return conn

    def try_take(self, name: str) -> PostgresLease | None:
        key = f"lease:{name}"
        with self._guard:
            if key in self._held:
                return None
            conn = self._connection()
            if not _try_lock(conn, key, 11):
                return None
            self._held.add(key)
            return PostgresLease(self, conn, key)

    def _release(self, conn: psycopg.Connection[Any], key: str) -> None:
        with self._guard:
            if conn is not self._conn or key not in self._held:
                return  # its session is gone, and the lock with it
            self._held.discard(key)
            # Unlocked at once: the next worker's scan may take the run over now.
            with suppress(psycopg.Error):
                conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 11))", (key,))

    def close(self) -> None:
        with self._guard:
            if self._conn is not None:
                with suppress(psycopg.Error):
                    self._conn.close()
            self._conn = None
            self._held.clear()


def _live_session(conn: psycopg.Connection[Any] | None, conninfo: str) -> psycopg.Connection[Any]:
    """`conn` while it is open, else a fresh autocommit session (the old one closed): a
    process's leases, and its run locks, each stack on one such session."""
    if conn is not None and not conn.closed and not conn.broken:
        return conn
    if conn is not None:
        with suppress(psycopg.Error):
            conn.close()
    return psycopg.connect(
        conninfo, autocommit=True, keepalives=1, keepalives_idle=5, keepalives_interval=2
    )


def _try_lock(conn: psycopg.Connection[Any], key: str, space: int) -> bool:
    """`pg_try_advisory_lock` on the session; a broken session is closed (the next take opens
    a fresh one) and the error raised."""
    try:
        row = conn.execute(
            "SELECT pg_try_advisory_lock(hashtextextended(%s, %s))", (key, space)
        ).fetchone()
    except psycopg.OperationalError:
        conn.close()
        raise
    return bool(row and row[0])
