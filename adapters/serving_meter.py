"""Managed serving's counters (V2) beside the log, like the run metrics: table
`serving_buckets(key, tokens, at)` holds each organization's chat token bucket (the rate limit),
`serving_usage(deployment_id, requests, prompt_tokens, completion_tokens, errors, cold_starts)`
each deployment's totals.

Not events: a chat request decides nothing an aggregate reads, and one event per request would
fill the log (and every rebuild) with traffic. The bucket is read and written under a row lock
(PostgreSQL `SELECT … FOR UPDATE`, SQLite's one writer), so every API process on the database
draws from the same bucket; the embedded SQLite file is one process's anyway.

The embedded default keeps them in `serving.db` in DATA_DIR; with PostgreSQL, tables beside the
event store (`entrypoints.bootstrap.open_meter`). Durability as the log store's
(`synchronous_commit=off`): a crash of the machine may lose the last moments of counts, never
the log's events.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from psycopg.sql import SQL, Identifier

from application.serving_usage import USAGE_FIELDS, take_token
from projections.store.pg import create_tables, open_pool

_COLUMNS = ", ".join(USAGE_FIELDS)
_ADDED = ", ".join(f"{c} = u.{c} + excluded.{c}" for c in USAGE_FIELDS)


def _counts(counts: Mapping[str, int]) -> list[int]:
    return [int(counts.get(name, 0)) for name in USAGE_FIELDS]


def _totals(rows: Sequence[Sequence[Any]]) -> dict[str, dict[str, int]]:
    return {str(r[0]): dict(zip(USAGE_FIELDS, (int(v) for v in r[1:]), strict=True)) for r in rows}


class SQLiteServingMeter:
    def __init__(self, path: str | Path) -> None:
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            Path(path).resolve().as_uri(), uri=True, check_same_thread=False, isolation_level=None
        )
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA busy_timeout = 30000")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS serving_buckets (key TEXT PRIMARY KEY,"
            " tokens REAL NOT NULL, at REAL NOT NULL) WITHOUT ROWID"
        )
        columns = ", ".join(f"{c} INTEGER NOT NULL DEFAULT 0" for c in USAGE_FIELDS)
        self._conn.execute(
            f"CREATE TABLE IF NOT EXISTS serving_usage (deployment_id TEXT PRIMARY KEY, {columns})"
            " WITHOUT ROWID"
        )

    def take(self, key: str, capacity: float, per_second: float, now: float) -> float:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")  # one writer: another process waits here
            try:
                row = self._conn.execute(
                    "SELECT tokens, at FROM serving_buckets WHERE key = ?", (key,)
                ).fetchone()
                tokens, at = (float(row[0]), float(row[1])) if row else (None, None)
                left, wait = take_token(tokens, at, now, capacity, per_second)
                self._conn.execute(
                    "INSERT INTO serving_buckets (key, tokens, at) VALUES (?, ?, ?)"
                    " ON CONFLICT (key) DO UPDATE SET tokens = excluded.tokens, at = excluded.at",
                    (key, left, max(now, at if at is not None else now)),
                )
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
        return wait

    def add_usage(self, deployment_id: str, counts: Mapping[str, int]) -> None:
        marks = ", ".join("?" for _ in USAGE_FIELDS)
        with self._lock:
            self._conn.execute(
                f"INSERT INTO serving_usage AS u (deployment_id, {_COLUMNS}) VALUES (?, {marks})"  # noqa: S608 - our column names
                f" ON CONFLICT (deployment_id) DO UPDATE SET {_ADDED}",
                (deployment_id, *_counts(counts)),
            )

    def usage(self, deployment_ids: Sequence[str]) -> dict[str, dict[str, int]]:
        if not deployment_ids:
            return {}
        marks = ", ".join("?" for _ in deployment_ids)
        with self._lock:
            rows = self._conn.execute(
                f"SELECT deployment_id, {_COLUMNS} FROM serving_usage"  # noqa: S608 - our columns
                f" WHERE deployment_id IN ({marks})",
                tuple(deployment_ids),
            ).fetchall()
        return _totals(rows)

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _no_commit_wait(conn: Any) -> None:
    conn.execute("SET synchronous_commit = off")


class PostgresServingMeter:
    def __init__(self, conninfo: str, *, schema: str = "public", pool_size: int = 2) -> None:
        self._buckets = Identifier(schema, "serving_buckets")
        self._usage = Identifier(schema, "serving_usage")
        self._pool = open_pool(conninfo, max_size=pool_size, configure=_no_commit_wait)
        columns = SQL(", ".join(f"{c} BIGINT NOT NULL DEFAULT 0" for c in USAGE_FIELDS))
        create_tables(
            self._pool,
            schema,
            [
                SQL(
                    "CREATE TABLE IF NOT EXISTS {} (key TEXT PRIMARY KEY,"
                    " tokens DOUBLE PRECISION NOT NULL, at DOUBLE PRECISION NOT NULL)"
                ).format(self._buckets),
                SQL("CREATE TABLE IF NOT EXISTS {} (deployment_id TEXT PRIMARY KEY, {})").format(
                    self._usage, columns
                ),
            ],
        )

    def take(self, key: str, capacity: float, per_second: float, now: float) -> float:
        with self._pool.connection() as conn, conn.transaction():
            # A full bucket's row first, so the lock below always has a row to hold.
            conn.execute(
                SQL(
                    "INSERT INTO {} (key, tokens, at) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING"
                ).format(self._buckets),
                (key, capacity, now),
            )
            row = conn.execute(
                SQL("SELECT tokens, at FROM {} WHERE key = %s FOR UPDATE").format(self._buckets),
                (key,),
            ).fetchone()
            at = float(row[1])
            left, wait = take_token(float(row[0]), at, now, capacity, per_second)
            conn.execute(
                SQL("UPDATE {} SET tokens = %s, at = %s WHERE key = %s").format(self._buckets),
                (left, max(now, at), key),
            )
        return wait

    def add_usage(self, deployment_id: str, counts: Mapping[str, int]) -> None:
        marks = SQL(", ".join("%s" for _ in USAGE_FIELDS))
        with self._pool.connection() as conn:
            conn.execute(
                SQL(
                    "INSERT INTO {} AS u (deployment_id, {}) VALUES (%s, {})"
                    " ON CONFLICT (deployment_id) DO UPDATE SET {}"
                ).format(self._usage, SQL(_COLUMNS), marks, SQL(_ADDED)),
                (deployment_id, *_counts(counts)),
            )

    def usage(self, deployment_ids: Sequence[str]) -> dict[str, dict[str, int]]:
        if not deployment_ids:
            return {}
        with self._pool.connection() as conn:
            rows = conn.execute(
                SQL("SELECT deployment_id, {} FROM {} WHERE deployment_id = ANY(%s)").format(
                    SQL(_COLUMNS), self._usage
                ),
                (list(deployment_ids),),
            ).fetchall()
        return _totals(rows)

    def close(self) -> None:
        self._pool.close()
