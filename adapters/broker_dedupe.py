"""Which (run id, notification id) messages an actor already handled.

An optimisation, not a correctness guarantee: `drive_run` is idempotent on aggregate state, so
forgetting an entry (LRU eviction, a worker restart, a pruned row) only costs one extra drive.
`MemoryDedupe` is per process (the embedded default); `PostgresDedupe` is shared by every
`tensorant worker`, so a message redelivered to another worker is skipped too.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Protocol

from psycopg.sql import SQL, Identifier
from psycopg_pool import ConnectionPool

from projections.store.pg import take_ddl_lock

Key = tuple[str, int]


class Dedupe(Protocol):
    """Claims a key once: `claim` is True only for the first caller; `release` undoes a claim."""

    def claim(self, key: Key) -> bool: ...

    def release(self, key: Key) -> None: ...


class MemoryDedupe:
    """A bounded, thread-safe LRU set of handled keys."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self._max = max_entries
        self._keys: OrderedDict[Key, None] = OrderedDict()
        self._lock = threading.Lock()

    def claim(self, key: Key) -> bool:
        with self._lock:
            if key in self._keys:
                self._keys.move_to_end(key)
                return False
            self._keys[key] = None
            while len(self._keys) > self._max:
                self._keys.popitem(last=False)
            return True

    def release(self, key: Key) -> None:
        with self._lock:
            self._keys.pop(key, None)


class PostgresDedupe:
    """A `broker_handled` table; rows older than `keep_days` are pruned now and then."""

    def __init__(
        self, conninfo: str, *, schema: str = "public", keep_days: int = 7, pool_size: int = 4
    ) -> None:
        self._table = Identifier(schema, "broker_handled")
        self._keep_days = keep_days
        self._claims = 0
        self._pool: ConnectionPool[Any] = ConnectionPool(
            conninfo, min_size=1, max_size=pool_size, kwargs={"autocommit": True}, open=True
        )
        with self._pool.connection() as conn, conn.transaction():
            take_ddl_lock(conn.execute)
            conn.execute(
                SQL(
                    "CREATE TABLE IF NOT EXISTS {} (run_id TEXT NOT NULL,"
                    " notification_id BIGINT NOT NULL,"
                    " handled_at TIMESTAMPTZ NOT NULL DEFAULT now(),"
                    " PRIMARY KEY (run_id, notification_id))"
                ).format(self._table)
            )

    def claim(self, key: Key) -> bool:
        with self._pool.connection() as conn:
            row = conn.execute(
                SQL(
                    "INSERT INTO {} (run_id, notification_id) VALUES (%s, %s)"
                    " ON CONFLICT DO NOTHING RETURNING 1"
                ).format(self._table),
                key,
            ).fetchone()
            self._claims += 1
            if self._claims % 1000 == 0:
                prune = "DELETE FROM {} WHERE handled_at < now() - make_interval(days => %s)"
                conn.execute(SQL(prune).format(self._table), (self._keep_days,))
        return row is not None

    def release(self, key: Key) -> None:
        with self._pool.connection() as conn:
            conn.execute(
                SQL("DELETE FROM {} WHERE run_id = %s AND notification_id = %s").format(
                    self._table
                ),
                key,
            )

    def close(self) -> None:
        self._pool.close()
