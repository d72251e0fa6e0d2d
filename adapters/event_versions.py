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

from collections.abc import Sequence
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
        return LogReads(_sqlite(recorder), _sqlite_events(recorder))
    if isinstance(recorder, PostgresAggregateRecorder):
        return LogReads(_postgres(recorder))
    return None


def _sqlite_events(recorder: SQLiteAggregateRecorder) -> EventsOf:
    """`recorder.select_events(uid)` in one statement (its own SELECT, ordered as it orders)."""
    statement = recorder.select_events_statement + "ORDER BY originator_version ASC"

    def read(uid: UUID) -> list[StoredEvent]:
        with recorder.datastore.get_connection(commit=False) as conn, conn.cursor() as c:
            c.execute(statement, [uid.hex])
            rows = c.fetchall()
        return [
            StoredEvent(uid, row["originator_version"], row["topic"], row["state"]) for row in rows
        ]

    return read


def _sqlite(recorder: SQLiteAggregateRecorder) -> LatestVersions:
    table = recorder.events_table_name.replace('"', '""')

    def read(uids: Sequence[UUID]) -> dict[UUID, int]:
        if not uids:
            return {}
        values = ", ".join("(?)" for _ in uids)
        statement = (
            f"WITH ids(id) AS (VALUES {values}) SELECT id, (SELECT MAX(originator_version)"  # noqa: S608 - only ? marks and the recorder's own table
            f' FROM "{table}" WHERE originator_id = id) FROM ids'
        )
        # one SELECT is atomic on its own: no BEGIN and ROLLBACK around it
        with recorder.datastore.get_connection(commit=False) as conn, conn.cursor() as c:
            c.execute(statement, [uid.hex for uid in uids])
            rows = c.fetchall()
        return {UUID(row[0]): int(row[1]) for row in rows if row[1] is not None}

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
