"""Trainer log lines (R6), kept outside the event store: they are not domain events.

Table `run_logs(run_id, seq, time, text)`, plus `run_log_heads(run_id, last_seq)` whose row lock
hands out sequence numbers, so concurrent appends (API processes, threads) never collide. Each
run keeps its newest `max_lines` lines; older ones are deleted on append, so a slow reader's
`after` may point below the oldest line kept and paging resumes at the oldest one.

A sender that retries (the trainer does, when an answer is lost) names each batch (a UUID): the
first append of `(run_id, batch)` stores the lines and records the last sequence number it got in
`run_log_batches`; a repeat stores nothing and answers that same number. A batch's record goes
when its lines are pruned.

`open_log_store("sqlite:///path/logs.db")` (the embedded default, a file of its own in DATA_DIR)
or `open_log_store("postgresql://...?schema=s")`. Thread-safe.

Durability: a commit here does not wait for the disk (SQLite WAL with `synchronous=NORMAL`,
PostgreSQL `synchronous_commit=off`); a crash of the machine or database server (not of our
process) may lose the last moments of lines, claims and report state, never half a transaction.
What a report changes in a run is an event, saved with full durability in the event store. A
lost claim lets a later copy of that report (another channel, a trainer's retry) apply again,
which the run commands are idempotent for; a lost line is stored when a copy brings it again.
Waiting for the disk here cost a trainer report three flushes beyond its event's one.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from psycopg.sql import SQL, Identifier, Literal
from psycopg.types.json import Jsonb

from adapters.event_versions import resolved
from application.ports import NewerReport, StateChange, WhileAt, change_state, finite
from projections.store.lru import Lru
from projections.store.pg import create_tables, open_pool, pinned_to, quoted, reading
from projections.store.urls import is_postgres_url, parse_postgres_url

DEFAULT_MAX_LINES = 5_000
# Run ids per `IN (...)` of SQLite (it bounds bound parameters per statement; stay well below).
_CHUNK = 400
Line = tuple[datetime, str]
ReportLine = tuple[str | None, int | None, datetime, str]  # (boot, seq, time, text)
LogPage = tuple[list[dict[str, Any]], int]


def _json(body: Any) -> str:
    """A state document's JSON text: orjson's (a claim's two stdlib encodings were ~6 us
    each), the stdlib's for what orjson refuses (an int beyond 64 bits). A float that is not
    a number is written null either way (the stdlib would write `NaN`, which is not JSON:
    PostgreSQL refused it)."""
    try:
        return orjson.dumps(body).decode()
    except orjson.JSONEncodeError:
        return json.dumps(finite(body))


def _utc(at: datetime) -> datetime:
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


class LogStore(ABC):
    """Append-only, bounded log lines per run, paged by sequence number."""

    def __init__(self, max_lines: int) -> None:
        if max_lines < 1:
            msg = "max_lines must be positive"
            raise ValueError(msg)
        self.max_lines = max_lines

    @abstractmethod
    def append(self, run_id: str, lines: Sequence[Line], batch: str | None = None) -> int:
        """Store lines in order; returns the run's last sequence number (0 if none yet).

        With `batch`, a repeated `(run_id, batch)` stores nothing and returns what the first did.
        """

    @abstractmethod
    def read(self, run_id: str, after: int = 0, limit: int = 500) -> LogPage:
        """Lines with seq > `after`, oldest first: ([{seq, time, text}], next_after)."""

    @abstractmethod
    def last_seq(self, run_id: str) -> int:
        """The run's last sequence number (0 if it has no lines)."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""

    # ------------------------------------------------ reports (R6): see ReportStore
    @abstractmethod
    def append_reports(self, run_id: str, lines: Sequence[ReportLine], via: str) -> int:
        """Claim each `(boot, seq)` and append only the unclaimed lines, in one transaction."""

    @abstractmethod
    def append_many(
        self,
        batches: Mapping[str, Sequence[ReportLine]],
        via: str,
        states: Mapping[str, Mapping[str, dict[str, Any]]],
        seen: tuple[str, dict[str, Any]] | None = None,
    ) -> dict[str, int]:
        """`append_reports` of many runs, their `states` (run id -> name -> body) replaced and,
        for each run with a freshly claimed reported line, `seen` (name, body), all in one
        transaction; returns run id -> lines stored."""

    @abstractmethod
    def claim(
        self,
        run_id: str,
        boot: str,
        seq: int,
        via: str,
        state: Mapping[str, StateChange] | None = None,
        while_at: WhileAt | None = None,
    ) -> bool:
        """True the first time `(run_id, boot, seq)` is claimed; a fresh claim also changes the
        `state` documents, in the same transaction (one commit for a report, not three).
        `while_at`: LogMoved, and nothing claimed, unless the log is at that version."""

    @abstractmethod
    def get_state(self, run_id: str, name: str) -> dict[str, Any] | None:
        """A small JSON state of the run's reports (progress, last seen, cursors)."""

    @abstractmethod
    def claimed_seqs(self, run_id: str, boot: str) -> set[int]:
        """The `seq`s of a trainer boot's reports claimed so far, by whichever channel."""

    @abstractmethod
    def get_states(self, run_ids: Sequence[str], name: str) -> dict[str, dict[str, Any]]:
        """`get_state` of many runs in one query: run id -> state (runs without one left out)."""

    def get_states_later(
        self, run_ids: Sequence[str], name: str
    ) -> Callable[[], dict[str, dict[str, Any]]]:
        """`get_states`, answered when called; this one reads at once."""
        found = self.get_states(run_ids, name)
        return lambda: found

    @abstractmethod
    def put_state(self, run_id: str, name: str, body: dict[str, Any]) -> None:
        """Replace one state document."""

    # ------------------------------------------------ metric series (R17)
    @abstractmethod
    def add_metric(self, run_id: str, boot: str, seq: int, point: dict[str, Any]) -> bool:
        """Keep one progress report's metrics; a repeated `(run_id, boot, seq)` keeps nothing
        (True: kept now)."""

    @abstractmethod
    def read_metrics(self, run_id: str, after: int = 0, limit: int = 500) -> LogPage:
        """Points with position > `after`, in the order they were kept:
        ([{pos, ...point}], next_after)."""


def _points(rows: Sequence[tuple[int, Any]], after: int) -> LogPage:
    points: list[dict[str, Any]] = []
    for pos, body in rows:
        point = dict(json.loads(body)) if isinstance(body, str) else dict(body)
        points.append({**point, "pos": int(pos)})
    return points, (int(rows[-1][0]) if rows else after)


def _fresh(
    run_id: str, lines: Sequence[ReportLine], claimed: set[tuple[str, str, int]]
) -> tuple[list[Line], bool]:
    """The lines to store of a run (plain ones, and those whose claim is fresh: the first copy
    of one within the batch) and whether any reported line was among them."""
    kept: list[Line] = []
    reported = False
    for boot, seq, at, text in lines:
        if boot is not None and seq is not None:
            key = (run_id, boot, seq)
            if key not in claimed:
                continue
            claimed.discard(key)  # a second copy in the same batch is not fresh
            reported = True
        kept.append((at, text))
    return kept, reported


def _page(rows: list[tuple[int, datetime, str]], after: int) -> LogPage:
    lines: list[dict[str, Any]] = [
        {"seq": seq, "time": _utc(at), "text": text} for seq, at, text in rows
    ]
    return lines, (rows[-1][0] if rows else after)


# `NewerReport` in SQLite's SQL: the update goes ahead unless the stored body `s` is of a newer
# report (text compared by SQLite's BINARY collation: by code point, as Python compares str).
_SQLITE_NEWER = (
    "CASE WHEN json_extract(s.body, '$.boot') = json_extract(excluded.body, '$.boot')"
    " THEN COALESCE(json_extract(s.body, '$.seq'), 0) < json_extract(excluded.body, '$.seq')"
    " ELSE COALESCE(json_extract(s.body, '$.time'), '') <= json_extract(excluded.body, '$.time')"
    " END"
)


class SQLiteLogStore(LogStore):
    """One WAL-mode SQLite file; one connection guarded by a lock.

    `events_path`: the event store's SQLite file. A claim `while_at` a version of its events
    table reads the aggregate's version inside the claim's transaction, from that file attached
    read-only (a reader in WAL mode: it never holds back the log's writers)."""

    def __init__(
        self,
        path: str | Path,
        *,
        max_lines: int = DEFAULT_MAX_LINES,
        events_path: str | Path | None = None,
    ) -> None:
        super().__init__(max_lines)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(
            Path(path).resolve().as_uri(), uri=True, check_same_thread=False, isolation_level=None
        )
        self._events = resolved(str(events_path)) if events_path is not None else None
        self._attached: tuple[str, str] | None = None  # (events table, its version read)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=NORMAL")  # see the module's docstring
        self._conn.execute("PRAGMA busy_timeout = 30000")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS run_logs (run_id TEXT NOT NULL, seq INTEGER NOT NULL,"
            " time TEXT NOT NULL, text TEXT NOT NULL, PRIMARY KEY (run_id, seq)) WITHOUT ROWID"
        )
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS run_log_heads"
            " (run_id TEXT PRIMARY KEY, last_seq INTEGER NOT NULL)"
        )
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS run_log_batches (run_id TEXT NOT NULL,"
            " batch TEXT NOT NULL, last_seq INTEGER NOT NULL, PRIMARY KEY (run_id, batch))"
            " WITHOUT ROWID"
        )
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS run_report_claims (run_id TEXT NOT NULL,"
            " boot TEXT NOT NULL, seq INTEGER NOT NULL, via TEXT NOT NULL,"
            " PRIMARY KEY (run_id, boot, seq)) WITHOUT ROWID"
        )
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS run_report_state (run_id TEXT NOT NULL,"
            " name TEXT NOT NULL, body TEXT NOT NULL, PRIMARY KEY (run_id, name)) WITHOUT ROWID"
        )
        # R17: one row per progress report; `pos` (the rowid) is the page cursor.
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS run_metrics (pos INTEGER PRIMARY KEY AUTOINCREMENT,"
            " run_id TEXT NOT NULL, boot TEXT NOT NULL, seq INTEGER NOT NULL, body TEXT NOT NULL,"
            " UNIQUE (run_id, boot, seq))"
        )
        self._conn.execute(
            "CREATE INDEX IF NOT EXISTS run_metrics_by_run ON run_metrics (run_id, pos)"
        )

    def append(self, run_id: str, lines: Sequence[Line], batch: str | None = None) -> int:
        if not lines:
            return self.last_seq(run_id)
        with self._lock:
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                if batch is not None:
                    seen = c.execute(
                        "SELECT last_seq FROM run_log_batches WHERE run_id = ? AND batch = ?",
                        (run_id, batch),
                    ).fetchone()
                    if seen is not None:
                        c.execute("COMMIT")
                        return int(seen[0])
                last = self._store(run_id, lines)
                if batch is not None:
                    c.execute(
                        "INSERT INTO run_log_batches (run_id, batch, last_seq) VALUES (?, ?, ?)",
                        (run_id, batch, last),
                    )
                c.execute(
                    "DELETE FROM run_log_batches WHERE run_id = ? AND last_seq <= ?",
                    (run_id, last - self.max_lines),
                )
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
        return int(last)

    def _store(self, run_id: str, lines: Sequence[Line]) -> int:
        """Append inside the caller's transaction (the lock held); returns the last seq."""
        c, n = self._conn, len(lines)
        (last,) = c.execute(
            "INSERT INTO run_log_heads (run_id, last_seq) VALUES (?, ?)"
            " ON CONFLICT (run_id) DO UPDATE SET last_seq = last_seq + excluded.last_seq"
            " RETURNING last_seq",
            (run_id, n),
        ).fetchone()
        first = last - n + 1
        c.executemany(
            "INSERT INTO run_logs (run_id, seq, time, text) VALUES (?, ?, ?, ?)",
            [(run_id, first + i, _utc(at).isoformat(), text) for i, (at, text) in enumerate(lines)],
        )
        c.execute(
            "DELETE FROM run_logs WHERE run_id = ? AND seq <= ?", (run_id, last - self.max_lines)
        )
        return int(last)

    def _claim(self, run_id: str, boot: str, seq: int, via: str) -> bool:
        """Claim report `seq` of `boot` for `via` (in the caller's transaction): True the first
        time any channel brings it, False for a copy (callback, mailbox and Pod log race)."""
        cur = self._conn.execute(
            "INSERT OR IGNORE INTO run_report_claims (run_id, boot, seq, via) VALUES (?, ?, ?, ?)",
            (run_id, boot, seq, via),
        )
        return bool(cur.rowcount == 1)

    def _claim_all(
        self, batches: Mapping[str, Sequence[ReportLine]], via: str
    ) -> set[tuple[str, str, int]]:
        """The reported lines' keys this call claimed first (see `_fresh`)."""
        return {
            (run_id, boot, seq)
            for run_id, lines in batches.items()
            for boot, seq, _at, _text in lines
            if boot is not None and seq is not None and self._claim(run_id, boot, seq, via)
        }

    def append_reports(self, run_id: str, lines: Sequence[ReportLine], via: str) -> int:
        if not lines:
            return 0
        with self._lock:
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                fresh, _ = _fresh(run_id, lines, self._claim_all({run_id: lines}, via))
                if fresh:
                    self._store(run_id, fresh)
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
        return len(fresh)

    def append_many(
        self,
        batches: Mapping[str, Sequence[ReportLine]],
        via: str,
        states: Mapping[str, Mapping[str, dict[str, Any]]],
        seen: tuple[str, dict[str, Any]] | None = None,
    ) -> dict[str, int]:
        stored: dict[str, int] = {}
        with self._lock:
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                claimed = self._claim_all(batches, via)
                for run_id, lines in batches.items():
                    kept, reported = _fresh(run_id, lines, claimed)
                    if kept:
                        self._store(run_id, kept)
                    stored[run_id] = len(kept)
                    if reported and seen is not None:
                        self._put_state(run_id, seen[0], seen[1])
                for run_id, named in states.items():
                    for name, body in named.items():
                        self._put_state(run_id, name, body)
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
        return stored

    def claim(
        self,
        run_id: str,
        boot: str,
        seq: int,
        via: str,
        state: Mapping[str, StateChange] | None = None,
        while_at: WhileAt | None = None,
    ) -> bool:
        changes = dict(state or {})
        by_rule = all(isinstance(change, dict | NewerReport) for change in changes.values())
        with self._lock:
            events = self._attach(while_at) if while_at is not None else None
            if while_at is not None and events is None:
                while_at.require()  # a log this store does not see: read before the claim
            c = self._conn
            c.execute("BEGIN IMMEDIATE")
            try:
                if while_at is not None and events is not None:
                    try:
                        latest = c.execute(events, (while_at.aggregate_id.hex,)).fetchone()[0]
                    except sqlite3.DatabaseError:  # the attached file unreadable here
                        latest = while_at.latest()
                    if latest != while_at.version:
                        raise while_at.moved(latest)
                fresh = self._claim(run_id, boot, seq, via)
                if fresh and changes and by_rule:
                    self._put_states_by_rule(run_id, changes)
                for name, change in changes.items() if fresh and not by_rule else ():
                    current = None
                    if callable(change):
                        row = c.execute(
                            "SELECT body FROM run_report_state WHERE run_id = ? AND name = ?",
                            (run_id, name),
                        ).fetchone()
                        current = dict(json.loads(row[0])) if row else None
                    body = change_state(change, current)
                    if body is not None:
                        self._put_state(run_id, name, body)
                c.execute("COMMIT")
            except BaseException:
                c.execute("ROLLBACK")
                raise
            return fresh

    def _attach(self, while_at: WhileAt) -> str | None:
        """The statement reading an aggregate's latest version in the claim's transaction, when
        `while_at` speaks of the event store's file; None for any other log."""
        if self._events is None or while_at.table is None:
            return None
        database, table = while_at.table
        if database != self._events:
            return None
        if self._attached is None:
            # Attached once the log has created its file (read-only: the claim's BEGIN
            # IMMEDIATE takes no write lock on it).
            try:
                self._conn.execute(
                    "ATTACH DATABASE ? AS log", (Path(self._events).as_uri() + "?mode=ro",)
                )
            except sqlite3.Error:
                return None  # not there (yet): the log is read apart, as for any other
            quoted = table.replace('"', '""')
            self._attached = (
                table,
                f'SELECT max(originator_version) FROM log."{quoted}" WHERE originator_id = ?',  # noqa: S608 - the log's own table
            )
        return self._attached[1] if self._attached[0] == table else None

    def claimed_seqs(self, run_id: str, boot: str) -> set[int]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT seq FROM run_report_claims WHERE run_id = ? AND boot = ?", (run_id, boot)
            ).fetchall()
        return {int(seq) for (seq,) in rows}

    def get_state(self, run_id: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT body FROM run_report_state WHERE run_id = ? AND name = ?", (run_id, name)
            ).fetchone()
        return dict(json.loads(row[0])) if row else None

    def get_states(self, run_ids: Sequence[str], name: str) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        ids = list(dict.fromkeys(run_ids))
        for i in range(0, len(ids), _CHUNK):
            chunk = ids[i : i + _CHUNK]
            marks = ",".join("?" * len(chunk))
            with self._lock:
                rows = self._conn.execute(
                    "SELECT run_id, body FROM run_report_state"  # noqa: S608 - only ? marks
                    f" WHERE name = ? AND run_id IN ({marks})",
                    (name, *chunk),
                ).fetchall()
            for run_id, body in rows:
                found[run_id] = dict(json.loads(body))
        return found

    def put_state(self, run_id: str, name: str, body: dict[str, Any]) -> None:
        with self._lock:
            self._put_state(run_id, name, body)

    def _put_states_by_rule(self, run_id: str, changes: Mapping[str, StateChange]) -> None:
        """Bodies and `NewerReport`s in one upsert: SQLite applies the rule (`_SQLITE_NEWER`)
        instead of this process reading the stored body back to decide."""
        rows: list[Any] = []
        newer: list[str] = []
        for name, change in changes.items():
            if isinstance(change, NewerReport):
                newer.append(name)
            body = change.body if isinstance(change, NewerReport) else change
            rows += [run_id, name, _json(body)]
        values = ", ".join("(?, ?, ?)" for _ in changes)
        query = (
            f"INSERT INTO run_report_state AS s (run_id, name, body) VALUES {values}"  # noqa: S608 - only ? marks
            " ON CONFLICT (run_id, name) DO UPDATE SET body = excluded.body"
        )
        if newer:
            marks = ", ".join("?" for _ in newer)
            query += f" WHERE excluded.name NOT IN ({marks}) OR {_SQLITE_NEWER}"
            rows += newer
        self._conn.execute(query, rows)

    def _put_state(self, run_id: str, name: str, body: dict[str, Any]) -> None:
        self._conn.execute(
            "INSERT INTO run_report_state (run_id, name, body) VALUES (?, ?, ?)"
            " ON CONFLICT (run_id, name) DO UPDATE SET body = excluded.body",
            (run_id, name, _json(body)),
        )

    def add_metric(self, run_id: str, boot: str, seq: int, point: dict[str, Any]) -> bool:
        with self._lock:
            cur = self._conn.execute(
                "INSERT OR IGNORE INTO run_metrics (run_id, boot, seq, body) VALUES (?, ?, ?, ?)",
                (run_id, boot, seq, _json(point)),
            )
        return cur.rowcount == 1

    def read_metrics(self, run_id: str, after: int = 0, limit: int = 500) -> LogPage:
        with self._lock:
            rows = self._conn.execute(
                "SELECT pos, body FROM run_metrics WHERE run_id = ? AND pos > ?"
                " ORDER BY pos LIMIT ?",
                (run_id, after, max(limit, 0)),
            ).fetchall()
        return _points(rows, after)

    def read(self, run_id: str, after: int = 0, limit: int = 500) -> LogPage:
        with self._lock:
            rows = self._conn.execute(
                "SELECT seq, time, text FROM run_logs WHERE run_id = ? AND seq > ?"
                " ORDER BY seq LIMIT ?",
                (run_id, after, max(limit, 0)),
            ).fetchall()
        return _page([(s, datetime.fromisoformat(t), x) for s, t, x in rows], after)

    def last_seq(self, run_id: str) -> int:
        with self._lock:
            row = self._conn.execute(
                "SELECT last_seq FROM run_log_heads WHERE run_id = ?", (run_id,)
            ).fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        with self._lock:
            self._conn.close()


def _no_commit_wait(conn: Any) -> None:
    """Commits of this store's connections do not wait for the WAL flush (module docstring)."""
    conn.execute("SET synchronous_commit = off")
    conn.commit()


# `NewerReport` in SQL: the stored body `s` stays when it is of a newer report (text compared
# by code point, as Python compares str, whatever the database's collation).
_NEWER = SQL(
    " WHERE CASE WHEN s.body->>'boot' = excluded.body->>'boot'"
    " THEN COALESCE((s.body->>'seq')::bigint, 0) < (excluded.body->>'seq')::bigint"
    " ELSE COALESCE(s.body->>'time', '') COLLATE \"C\" <= (excluded.body->>'time') COLLATE \"C\""
    " END"
)


class PostgresLogStore(LogStore):
    """Tables in `schema`; a small connection pool (psycopg_pool is thread-safe)."""

    def __init__(
        self,
        conninfo: str,
        *,
        schema: str = "public",
        max_lines: int = DEFAULT_MAX_LINES,
        pool_size: int = 4,
        log_in_database: bool = False,
    ) -> None:
        """`log_in_database`: the event store is in this database (the same conninfo), so a
        claim `while_at` a version reads it in the claim's own statement."""
        super().__init__(max_lines)
        self._log_in_database = log_in_database
        self._logs = Identifier(schema, "run_logs")
        self._heads = Identifier(schema, "run_log_heads")
        self._batches = Identifier(schema, "run_log_batches")
        self._claims = Identifier(schema, "run_report_claims")
        self._state = Identifier(schema, "run_report_state")
        self._metrics = Identifier(schema, "run_metrics")
        self._get_states_sql = quoted(
            SQL("SELECT run_id, body FROM {} WHERE name = %s AND run_id = ANY(%s)").format(
                self._state
            )
        )
        self._bound: Lru[tuple[str, tuple[str, ...]], bytes] = Lru(256)  # `_states_args`
        # `_claim_statement`s by (events table, which changes are `NewerReport`s)
        self._claim_statements: Lru[tuple[tuple[str, str] | None, tuple[bool, ...]], bytes]
        self._claim_statements = Lru(16)
        self._pool = open_pool(conninfo, max_size=pool_size, configure=_no_commit_wait)
        create_tables(
            self._pool,
            schema,
            [
                SQL(
                    "CREATE TABLE IF NOT EXISTS {} (run_id TEXT NOT NULL, seq BIGINT NOT NULL,"
                    " time TIMESTAMPTZ NOT NULL, text TEXT NOT NULL, PRIMARY KEY (run_id, seq))"
                ).format(self._logs),
                SQL(
                    "CREATE TABLE IF NOT EXISTS {}"
                    " (run_id TEXT PRIMARY KEY, last_seq BIGINT NOT NULL)"
                ).format(self._heads),
                SQL(
                    "CREATE TABLE IF NOT EXISTS {} (run_id TEXT NOT NULL, batch TEXT NOT NULL,"
                    " last_seq BIGINT NOT NULL, PRIMARY KEY (run_id, batch))"
                ).format(self._batches),
                SQL(
                    "CREATE TABLE IF NOT EXISTS {} (run_id TEXT NOT NULL, boot TEXT NOT NULL,"
                    " seq BIGINT NOT NULL, via TEXT NOT NULL, PRIMARY KEY (run_id, boot, seq))"
                ).format(self._claims),
                SQL(
                    "CREATE TABLE IF NOT EXISTS {} (run_id TEXT NOT NULL, name TEXT NOT NULL,"
                    " body JSONB NOT NULL, PRIMARY KEY (run_id, name))"
                ).format(self._state),
                SQL(
                    "CREATE TABLE IF NOT EXISTS {} (pos BIGSERIAL PRIMARY KEY,"
                    " run_id TEXT NOT NULL, boot TEXT NOT NULL, seq BIGINT NOT NULL,"
                    " body JSONB NOT NULL, UNIQUE (run_id, boot, seq))"
                ).format(self._metrics),
                SQL("CREATE INDEX IF NOT EXISTS {} ON {} (run_id, pos)").format(
                    Identifier("run_metrics_by_run"), self._metrics
                ),
            ],
        )

    def append(self, run_id: str, lines: Sequence[Line], batch: str | None = None) -> int:
        if not lines:
            return self.last_seq(run_id)
        with self._pool.connection() as conn, conn.transaction():
            if batch is not None:
                # Two copies of a batch at once: the second waits on the first's key, then sees it.
                claimed = conn.execute(
                    SQL(
                        "INSERT INTO {} (run_id, batch, last_seq) VALUES (%s, %s, 0)"
                        " ON CONFLICT DO NOTHING RETURNING 1"
                    ).format(self._batches),
                    (run_id, batch),
                ).fetchone()
                if claimed is None:
                    seen = conn.execute(
                        SQL("SELECT last_seq FROM {} WHERE run_id = %s AND batch = %s").format(
                            self._batches
                        ),
                        (run_id, batch),
                    ).fetchone()
                    assert seen is not None
                    return int(seen[0])
            last = self._store(conn, run_id, lines)
            if batch is not None:
                conn.execute(
                    SQL("UPDATE {} SET last_seq = %s WHERE run_id = %s AND batch = %s").format(
                        self._batches
                    ),
                    (last, run_id, batch),
                )
            conn.execute(
                SQL("DELETE FROM {} WHERE run_id = %s AND last_seq <= %s").format(self._batches),
                (run_id, last - self.max_lines),
            )
        return last

    def _store(self, conn: Any, run_id: str, lines: Sequence[Line]) -> int:
        """Append inside the caller's transaction; returns the last seq."""
        n = len(lines)
        row = conn.execute(
            SQL(
                "INSERT INTO {h} (run_id, last_seq) VALUES (%s, %s) ON CONFLICT (run_id)"
                " DO UPDATE SET last_seq = {h}.last_seq + excluded.last_seq RETURNING last_seq"
            ).format(h=self._heads),
            (run_id, n),
        ).fetchone()
        assert row is not None
        last = int(row[0])
        first = last - n + 1
        with conn.cursor() as cur:
            cur.executemany(
                SQL("INSERT INTO {} (run_id, seq, time, text) VALUES (%s, %s, %s, %s)").format(
                    self._logs
                ),
                [(run_id, first + i, _utc(at), text) for i, (at, text) in enumerate(lines)],
            )
        conn.execute(
            SQL("DELETE FROM {} WHERE run_id = %s AND seq <= %s").format(self._logs),
            (run_id, last - self.max_lines),
        )
        return last

    def append_reports(self, run_id: str, lines: Sequence[ReportLine], via: str) -> int:
        if not lines:
            return 0
        with self._pool.connection() as conn, conn.transaction():
            fresh, _ = _fresh(run_id, lines, self._claim_all(conn, {run_id: lines}, via))
            if fresh:
                self._store(conn, run_id, fresh)
        return len(fresh)

    def _claim_all(
        self, conn: Any, batches: Mapping[str, Sequence[ReportLine]], via: str
    ) -> set[tuple[str, str, int]]:
        """The reported lines' keys this call claimed first, in one statement (see `_fresh`)."""
        keys = [
            (run_id, boot, seq)
            for run_id, lines in batches.items()
            for boot, seq, _at, _text in lines
            if boot is not None and seq is not None
        ]
        if not keys:
            return set()
        rows = conn.execute(
            SQL(
                "INSERT INTO {} (run_id, boot, seq, via) SELECT r, b, s, %s"
                " FROM unnest(%s::text[], %s::text[], %s::bigint[]) AS u(r, b, s)"
                " ON CONFLICT DO NOTHING RETURNING run_id, boot, seq"
            ).format(self._claims),
            (via, [k[0] for k in keys], [k[1] for k in keys], [k[2] for k in keys]),
        ).fetchall()
        return {(str(r), str(b), int(q)) for r, b, q in rows}

    def append_many(
        self,
        batches: Mapping[str, Sequence[ReportLine]],
        via: str,
        states: Mapping[str, Mapping[str, dict[str, Any]]],
        seen: tuple[str, dict[str, Any]] | None = None,
    ) -> dict[str, int]:
        """Five statements, each over arrays, whatever the number of runs and lines: claims,
        sequence heads, lines, pruning, states (one round trip each in one transaction, where
        a run at a time cost five and a transaction per run)."""
        stored: dict[str, int] = {}
        with self._pool.connection() as conn, conn.transaction():
            claimed = self._claim_all(conn, batches, via)
            kept: dict[str, list[Line]] = {}
            bodies: dict[tuple[str, str], dict[str, Any]] = {}
            for run_id, lines in batches.items():
                fresh, reported = _fresh(run_id, lines, claimed)
                stored[run_id] = len(fresh)
                if fresh:
                    kept[run_id] = fresh
                if reported and seen is not None:
                    bodies[(run_id, seen[0])] = seen[1]
            for run_id, named in states.items():
                for name, body in named.items():
                    bodies[(run_id, name)] = body
            if kept:
                self._store_many(conn, kept)
            if bodies:
                conn.execute(
                    SQL(
                        "INSERT INTO {} (run_id, name, body)"
                        " SELECT * FROM unnest(%s::text[], %s::text[], %s::jsonb[])"
                        " ON CONFLICT (run_id, name) DO UPDATE SET body = excluded.body"
                    ).format(self._state),
                    (
                        [r for r, _ in bodies],
                        [n for _, n in bodies],
                        [_json(b) for b in bodies.values()],
                    ),
                )
        return stored

    def _store_many(self, conn: Any, kept: Mapping[str, Sequence[Line]]) -> None:
        """`_store` of many runs in three statements (heads, lines, pruning)."""
        runs = list(kept)
        heads = conn.execute(
            SQL(
                "INSERT INTO {h} (run_id, last_seq) SELECT * FROM unnest(%s::text[], %s::bigint[])"
                " ON CONFLICT (run_id) DO UPDATE SET last_seq = {h}.last_seq + excluded.last_seq"
                " RETURNING run_id, last_seq"
            ).format(h=self._heads),
            (runs, [len(kept[r]) for r in runs]),
        ).fetchall()
        last = {str(r): int(n) for r, n in heads}
        ids: list[str] = []
        seqs: list[int] = []
        times: list[datetime] = []
        texts: list[str] = []
        for run_id in runs:
            lines = kept[run_id]
            first = last[run_id] - len(lines) + 1
            for i, (at, text) in enumerate(lines):
                ids.append(run_id)
                seqs.append(first + i)
                times.append(_utc(at))
                texts.append(text)
        conn.execute(
            SQL(
                "INSERT INTO {} (run_id, seq, time, text)"
                " SELECT * FROM unnest(%s::text[], %s::bigint[], %s::timestamptz[], %s::text[])"
            ).format(self._logs),
            (ids, seqs, times, texts),
        )
        conn.execute(
            SQL(
                "DELETE FROM {} l USING unnest(%s::text[], %s::bigint[]) AS p(r, upto)"
                " WHERE l.run_id = p.r AND l.seq <= p.upto"
            ).format(self._logs),
            (runs, [last[r] - self.max_lines for r in runs]),
        )

    def claim(
        self,
        run_id: str,
        boot: str,
        seq: int,
        via: str,
        state: Mapping[str, StateChange] | None = None,
        while_at: WhileAt | None = None,
    ) -> bool:
        changes = dict(state or {})
        by_rule = all(isinstance(change, dict | NewerReport) for change in changes.values())
        if while_at is not None and not (by_rule and self._sees(while_at)):
            while_at.require()
            while_at = None
        if by_rule:
            return self._claim_in_one_statement(run_id, boot, seq, via, changes, while_at)
        reads = [name for name, change in changes.items() if callable(change)]
        # One statement claims and reads (locked) the bodies the changes are functions of, and
        # one writes them: a report costs two round trips inside its transaction, not 2 + 2n.
        query = SQL(
            "WITH c AS (INSERT INTO {} (run_id, boot, seq, via) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT DO NOTHING RETURNING 1) SELECT EXISTS (SELECT 1 FROM c)"
        ).format(self._claims)
        params: list[Any] = [run_id, boot, seq, via]
        for name in reads:
            query += SQL(
                ", (SELECT body FROM {} WHERE run_id = %s AND name = %s FOR UPDATE)"
            ).format(self._state)
            params += [run_id, name]
        # Pipelined: BEGIN goes with the claim, and the write with COMMIT (two round trips).
        with self._pool.connection() as conn, conn.pipeline(), conn.transaction():
            row = conn.execute(query, params).fetchone()
            assert row is not None
            if not row[0]:
                return False
            current = dict(zip(reads, row[1:], strict=True))
            rows: list[Any] = []
            for name, change in changes.items():
                before = current.get(name)
                body = change_state(change, dict(before) if before is not None else None)
                if body is not None:
                    rows += [run_id, name, Jsonb(body, dumps=_json)]
            if rows:
                values = SQL(", ").join(SQL("(%s, %s, %s)") for _ in range(len(rows) // 3))
                conn.execute(
                    SQL(
                        "INSERT INTO {} (run_id, name, body) VALUES {}"
                        " ON CONFLICT (run_id, name) DO UPDATE SET body = excluded.body"
                    ).format(self._state, values),
                    rows,
                )
        return True

    def _sees(self, while_at: WhileAt) -> bool:
        """Whether this store's statements can read the log `while_at` speaks of."""
        return self._log_in_database and while_at.table is not None

    def _claim_in_one_statement(
        self,
        run_id: str,
        boot: str,
        seq: int,
        via: str,
        changes: Mapping[str, StateChange],
        while_at: WhileAt | None = None,
    ) -> bool:
        """A claim whose changes are bodies or `NewerReport`s: one statement (one round trip,
        its own transaction) claims and, only if the claim is fresh, upserts each state; a
        `NewerReport` replaces the body unless the stored one is of a newer report. PostgreSQL
        judges that against the row's latest version under its lock (ON CONFLICT DO UPDATE),
        so two reports of one run arriving at once keep the newer. With `while_at` (a table
        this store sees), the same statement reads the aggregate's latest version and claims
        only at that version: a trainer's report reads its run's version in its claim's round
        trip, not one of its own before it."""
        table = while_at.table if while_at is not None else None
        newer = tuple(isinstance(change, NewerReport) for change in changes.values())
        query = self._claim_statements.get((table, newer))
        if query is None:
            query = self._claim_statement(table, newer)
            self._claim_statements.put((table, newer), query)
        params: list[Any] = [] if while_at is None else [while_at.aggregate_id]
        params += [run_id, boot, seq, via]
        if while_at is not None:
            params.append(while_at.version)
        for name, change in changes.items():
            body = change.body if isinstance(change, NewerReport) else change
            params += [run_id, name, Jsonb(body, dumps=_json)]
        with self._pool.connection() as conn:  # autocommit: the statement is its transaction
            row = conn.execute(query, params, prepare=True).fetchone()
        assert row is not None
        if while_at is not None and row[1] != while_at.version:
            raise while_at.moved(row[1])
        return bool(row[0])

    def _claim_statement(self, events: tuple[str, str] | None, newer: tuple[bool, ...]) -> bytes:
        """The claim of `_claim_in_one_statement` with one upsert per change (`newer`: whether
        it is a `NewerReport`), quoted once: composing it per report cost ~60 us. `events`:
        the log's events table, when the claim holds only at an aggregate's version (its
        latest, read by the statement, is its second column)."""
        if events is None:
            query = SQL(
                "WITH c AS (INSERT INTO {} (run_id, boot, seq, via) VALUES (%s, %s, %s, %s)"
                " ON CONFLICT DO NOTHING RETURNING 1)"
            ).format(self._claims)
        else:
            # The index's last entry for the id (primary key (originator_id, version)).
            query = SQL(
                "WITH v AS (SELECT max(originator_version) AS v FROM {}"
                " WHERE originator_id = %s),"
                " c AS (INSERT INTO {} (run_id, boot, seq, via) SELECT %s, %s, %s, %s"
                " WHERE (SELECT v FROM v) = %s ON CONFLICT DO NOTHING RETURNING 1)"
            ).format(Identifier(*events), self._claims)
        for i, rule in enumerate(newer):
            query += SQL(
                ", {} AS (INSERT INTO {} AS s (run_id, name, body) SELECT %s, %s, %s"
                " WHERE EXISTS (SELECT 1 FROM c)"
                " ON CONFLICT (run_id, name) DO UPDATE SET body = excluded.body{})"
            ).format(Identifier(f"s{i}"), self._state, _NEWER if rule else SQL(""))
        result = " SELECT EXISTS (SELECT 1 FROM c)"
        if events is not None:
            result += ", (SELECT v FROM v)"
        return quoted(query + SQL(result))

    def claimed_seqs(self, run_id: str, boot: str) -> set[int]:
        with reading(self._pool) as conn:
            rows = conn.execute(
                SQL("SELECT seq FROM {} WHERE run_id = %s AND boot = %s").format(self._claims),
                (run_id, boot),
            ).fetchall()
        return {int(seq) for (seq,) in rows}

    def get_state(self, run_id: str, name: str) -> dict[str, Any] | None:
        with reading(self._pool) as conn:  # a request's pinned connection (`one_connection`)
            row = conn.execute(
                SQL("SELECT body FROM {} WHERE run_id = %s AND name = %s").format(self._state),
                (run_id, name),
            ).fetchone()
        return dict(row[0]) if row else None

    def get_states(self, run_ids: Sequence[str], name: str) -> dict[str, dict[str, Any]]:
        if not run_ids:
            return {}
        with reading(self._pool) as conn:
            rows = conn.execute(self._get_states_sql, (name, list(run_ids))).fetchall()
        return {str(run_id): dict(body) for run_id, body in rows}

    def get_states_later(
        self, run_ids: Sequence[str], name: str
    ) -> Callable[[], dict[str, dict[str, Any]]]:
        """Inside a pinned connection of this database (`projections.store.pg.one_connection`),
        held back and sent with the next read on it."""
        pinned = pinned_to(self._pool)
        if pinned is None or not run_ids:
            return super().get_states_later(run_ids, name)
        ids = tuple(run_ids)
        rows = pinned.later(self._get_states_sql, (name, list(ids)), self._states_args(name, ids))
        return lambda: {str(run_id): dict(body) for run_id, body in rows()}

    def _states_args(self, name: str, run_ids: tuple[str, ...]) -> bytes:
        """`get_states`' parameters bound as an EXECUTE's arguments, kept per (name, ids): a
        held-back read is bound client-side, and quoting a list's 100 run ids was ~95 us of
        each GET /v1/runs (the same ids, request after request)."""
        key = (name, run_ids)
        found = self._bound.get(key)
        if found is None:
            found = b"(%s, %s)" % (
                Literal(name).as_bytes(),
                Literal(list(run_ids)).as_bytes(),
            )
            self._bound.put(key, found)
        return found

    def put_state(self, run_id: str, name: str, body: dict[str, Any]) -> None:
        with self._pool.connection() as conn, conn.transaction():
            self._put_state(conn, run_id, name, body)

    def _put_state(self, conn: Any, run_id: str, name: str, body: dict[str, Any]) -> None:
        conn.execute(
            SQL(
                "INSERT INTO {} (run_id, name, body) VALUES (%s, %s, %s)"
                " ON CONFLICT (run_id, name) DO UPDATE SET body = excluded.body"
            ).format(self._state),
            (run_id, name, Jsonb(body, dumps=_json)),
        )

    def add_metric(self, run_id: str, boot: str, seq: int, point: dict[str, Any]) -> bool:
        with self._pool.connection() as conn:
            row = conn.execute(
                SQL(
                    "INSERT INTO {} (run_id, boot, seq, body) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT DO NOTHING RETURNING 1"
                ).format(self._metrics),
                (run_id, boot, seq, Jsonb(point, dumps=_json)),
            ).fetchone()
        return row is not None

    def read_metrics(self, run_id: str, after: int = 0, limit: int = 500) -> LogPage:
        with reading(self._pool) as conn:
            rows = conn.execute(
                SQL(
                    "SELECT pos, body FROM {} WHERE run_id = %s AND pos > %s ORDER BY pos LIMIT %s"
                ).format(self._metrics),
                (run_id, after, max(limit, 0)),
            ).fetchall()
        return _points(rows, after)

    def read(self, run_id: str, after: int = 0, limit: int = 500) -> LogPage:
        with self._pool.connection() as conn:
            rows = conn.execute(
                SQL(
                    "SELECT seq, time, text FROM {} WHERE run_id = %s AND seq > %s"
                    " ORDER BY seq LIMIT %s"
                ).format(self._logs),
                (run_id, after, max(limit, 0)),
            ).fetchall()
        return _page([(int(s), t, x) for s, t, x in rows], after)

    def last_seq(self, run_id: str) -> int:
        with self._pool.connection() as conn:
            row = conn.execute(
                SQL("SELECT last_seq FROM {} WHERE run_id = %s").format(self._heads), (run_id,)
            ).fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        self._pool.close()


def open_log_store(url: str, *, max_lines: int = DEFAULT_MAX_LINES) -> LogStore:
    """`sqlite:///path` or `postgresql://...[?schema=s]` (the schema parameter is ours)."""
    if url.startswith("sqlite:///"):
        return SQLiteLogStore(url.removeprefix("sqlite:///"), max_lines=max_lines)
    if is_postgres_url(url):
        pg = parse_postgres_url(url)
        return PostgresLogStore(pg.conninfo, schema=pg.schema, max_lines=max_lines)
    msg = f"unsupported log store URL {url!r} (use sqlite:/// or postgresql://)"
    raise ValueError(msg)
