"""Per-run mutual exclusion across worker processes: PostgreSQL advisory locks."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool


class PostgresRunLocks:
    """`pg_advisory_lock` on the run id, held for one drive; dies with the holder's session."""

    def __init__(self, conninfo: str, max_size: int = 8) -> None:
        self.pool = ConnectionPool(
            conninfo, min_size=0, max_size=max_size, open=True, kwargs={"autocommit": True}
        )

    @contextmanager
    def hold(self, run_id: str) -> Iterator[None]:
        with self.pool.connection() as conn:
            conn.execute("SELECT pg_advisory_lock(hashtextextended(%s, 7))", (f"run:{run_id}",))
            try:
                yield
            finally:
                conn.execute(
                    "SELECT pg_advisory_unlock(hashtextextended(%s, 7))", (f"run:{run_id}",)
                )

    def close(self) -> None:
        self.pool.close()


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
        if self._conn is None or self._conn.closed or self._conn.broken:
            if self._conn is not None:
                with suppress(psycopg.Error):
                    self._conn.close()
            # A new session holds nothing: leases of the lost one are free for any worker.
            self._held.clear()
            self._conn = psycopg.connect(
                self.conninfo,
                autocommit=True,
                keepalives=1,
                keepalives_idle=5,
                keepalives_interval=2,
            )
        return self._conn

    def try_take(self, name: str) -> PostgresLease | None:
        key = f"lease:{name}"
        with self._guard:
            if key in self._held:
                return None
            conn = self._connection()
            try:
                row = conn.execute(
                    "SELECT pg_try_advisory_lock(hashtextextended(%s, 11))", (key,)
                ).fetchone()
            except psycopg.OperationalError:
                conn.close()  # the next take opens a fresh session
                raise
            if not row or not row[0]:
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
