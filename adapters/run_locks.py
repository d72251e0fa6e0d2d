"""Per-run mutual exclusion across worker processes: PostgreSQL advisory locks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

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
