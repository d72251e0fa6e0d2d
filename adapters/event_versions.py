"""Reads of the log's own recorder in one statement: many aggregates' latest versions, and
one aggregate's events on SQLite.

`TensorantLog.peek` asks for the versions of the aggregates it is about to read and reads again
only those it does not hold at that version. eventsourcing's recorders answer one aggregate per
call (a transaction on SQLite, a round trip on PostgreSQL), so a draft's three checks would cost
three; this asks once. Each version is the index's last entry for the id (the events table's
primary key is `(originator_id, originator_version)`), so the cost does not grow with the log.

`load` reads an aggregate's events; the library wraps that SQLite SELECT in BEGIN and ROLLBACK,
two statements more than it needs (a SELECT is atomic on its own): 42 of a load's 90 µs were
the read, 20 without them. PostgreSQL's reads are the library's.
"""

from __future__ import annotations

import sqlite3
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from uuid import UUID

from eventsourcing.persistence import ApplicationRecorder, StoredEvent
from eventsourcing.postgres import PostgresAggregateRecorder
from eventsourcing.sqlite import SQLiteAggregateRecorder
from psycopg.sql import SQL, Identifier

from application.log import EventsOf, LatestVersions, LogReads


def log_reads(recorder: ApplicationRecorder) -> LogReads | None:
    """The reads for this recorder, or None for a recorder it does not know (then the log
    reads through the library)."""
    if isinstance(recorder, SQLiteAggregateRecorder):
        reads = _SQLiteReads(recorder)
        table = None if reads.db is None else (reads.db, recorder.events_table_name)
        return LogReads(
            _sqlite(recorder, reads), _sqlite_events(recorder, reads), events_table=table
        )
    if isinstance(recorder, PostgresAggregateRecorder):
        table = (recorder.datastore.schema, recorder.events_table_name)
        return LogReads(_postgres(recorder), events_table=table)
    return None


class _SQLiteReads:
    """Reads of the log's database file on one plain connection of its own, kept open.

    A read through the library's pool right after a commit (a trainer report's version read
    follows the last report's save) cost 38 µs against 15 on a plain connection (the pool's
    reader-writer interlock and its hand-over); a SELECT is atomic on its own, and in WAL
    mode it sees every committed write. An in-memory database is one per connection, so
    there the pool's connection serves."""

    def __init__(self, recorder: SQLiteAggregateRecorder) -> None:
        pool = recorder.datastore.pool
        self._datastore = recorder.datastore
        self._db = None if pool.is_sqlite_memory_mode else pool.db_name
        # The file, by its absolute path (`events_table`); None in memory or given as a URI.
        self.db = None if self._db is None or self._db.startswith("file:") else resolved(self._db)
        self._timeout = pool.lock_timeout or 5.0
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()

    def rows(self, statement: str, params: Sequence[Any]) -> list[Any]:
        if self._db is None:
            with self._datastore.get_connection(commit=False) as conn, conn.cursor() as c:
                c.execute(statement, params)
                return list(c.fetchall())
        with self._lock:
            if self._conn is None:
                self._conn = sqlite3.connect(
                    self._db,
                    uri=True,
                    check_same_thread=False,
                    isolation_level=None,  # autocommit: each SELECT is its own read
                    timeout=self._timeout,
                )
                self._conn.row_factory = sqlite3.Row
                weakref.finalize(self, self._conn.close)
            # fetched whole, so no read stays open to hold back the WAL's checkpoints
            return self._conn.execute(statement, params).fetchall()


def resolved(path: str) -> str:
    """An SQLite file's absolute path, as a log store compares it (`SQLiteLogStore`)."""
    return str(Path(path).resolve())


def _sqlite_events(recorder: SQLiteAggregateRecorder, reads: _SQLiteReads) -> EventsOf:
    """`recorder.select_events(uid)` in one statement (its own SELECT, ordered as it orders)."""
    statement = recorder.select_events_statement + "ORDER BY originator_version ASC"

    def read(uid: UUID) -> list[StoredEvent]:
        rows = reads.rows(statement, [uid.hex])
        return [
            StoredEvent(uid, row["originator_version"], row["topic"], row["state"]) for row in rows
        ]

    return read


def _sqlite(recorder: SQLiteAggregateRecorder, reads: _SQLiteReads) -> LatestVersions:
    table = recorder.events_table_name.replace('"', '""')
    one = f'SELECT MAX(originator_version) FROM "{table}" WHERE originator_id = ?'  # noqa: S608 - the recorder's own table

    def read(uids: Sequence[UUID]) -> dict[UUID, int]:
        if not uids:
            return {}
        if len(uids) == 1:  # a trainer report's run: the plain statement, 20 µs less
            found = reads.rows(one, [uids[0].hex])[0][0]
            return {} if found is None else {uids[0]: int(found)}
        asked = {uid.hex: uid for uid in uids}  # the ids given back, not parsed again
        values = ", ".join("(?)" for _ in asked)
        statement = (
            f"WITH ids(id) AS (VALUES {values}) SELECT id, (SELECT MAX(originator_version)"  # noqa: S608 - only ? marks and the recorder's own table
            f' FROM "{table}" WHERE originator_id = id) FROM ids'
        )
        rows = reads.rows(statement, list(asked))
        return {asked[row[0]]: int(row[1]) for row in rows if row[1] is not None}

    return read


def _postgres(recorder: PostgresAggregateRecorder) -> LatestVersions:
    statement = SQL(
        "SELECT id AS originator_id, (SELECT max(originator_version) FROM {} WHERE"
        " originator_id = id) AS originator_version FROM unnest(%s::uuid[]) AS id"
    ).format(Identifier(recorder.datastore.schema, recorder.events_table_name))

    def read(uids: Sequence[UUID]) -> dict[UUID, int]:
        if not uids:
            return {}
        with recorder.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(statement, [list(uids)], prepare=True)
            rows = curs.fetchall()
        return {
            row["originator_id"]: int(row["originator_version"])
            for row in rows
            if row["originator_version"] is not None
        }

    return read
