"""Per-run mutual exclusion across worker processes: PostgreSQL advisory locks."""

from __future__ import annotations

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
    """A session-level advisory lock on a connection of its own: it ends with the session, so
    a worker killed with SIGKILL frees it as soon as PostgreSQL notices the dropped socket."""

    def __init__(self, conn: psycopg.Connection[Any], key: str) -> None:
        self._conn = conn
        self._key = key

    def release(self) -> None:
        # Unlock before closing: the server ends a closed session asynchronously, so a lease
        # freed only by the close could still look held to the next worker for a moment.
        with suppress(psycopg.Error):
            self._conn.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 11))", (self._key,))
        with suppress(psycopg.Error):
            self._conn.close()


class PostgresLeases:
    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo

    def try_take(self, name: str) -> PostgresLease | None:
        conn = psycopg.connect(
            self.conninfo, autocommit=True, keepalives=1, keepalives_idle=5, keepalives_interval=2
        )
        key = f"lease:{name}"
        row = conn.execute(
            "SELECT pg_try_advisory_lock(hashtextextended(%s, 11))", (key,)
        ).fetchone()
        if not row or not row[0]:
            conn.close()
            return None
        return PostgresLease(conn, key)
