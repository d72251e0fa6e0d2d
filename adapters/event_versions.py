"""Many aggregates' latest versions in one statement, on the log's own recorder.

`TensorantLog.peek` asks for the versions of the aggregates it is about to read and reads again
only those it does not hold at that version. eventsourcing's recorders answer one aggregate per
call (a transaction on SQLite, a round trip on PostgreSQL), so a draft's three checks would cost
three; this asks once. Each version is the index's last entry for the id (the events table's
primary key is `(originator_id, originator_version)`), so the cost does not grow with the log.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from eventsourcing.persistence import ApplicationRecorder
from eventsourcing.postgres import PostgresAggregateRecorder
from eventsourcing.sqlite import SQLiteAggregateRecorder
from psycopg.sql import SQL, Identifier

from application.log import LatestVersions


def latest_versions(recorder: ApplicationRecorder) -> LatestVersions | None:
    """The reader for this recorder, or None for a recorder it does not know (then `peek`
    asks per aggregate through the library)."""
    if isinstance(recorder, SQLiteAggregateRecorder):
        return _sqlite(recorder)
    if isinstance(recorder, PostgresAggregateRecorder):
        return _postgres(recorder)
    return None


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
