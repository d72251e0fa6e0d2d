"""The SQLite view store: a WAL-mode database file of its own, beside the event store's."""

from __future__ import annotations

import json
import queue
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any

from projections.store.base import (
    BulkWriter,
    ConcurrentApplyError,
    Doc,
    DocKey,
    DocKeys,
    DocText,
    KeyedDocs,
    KeyedTexts,
    ViewBatch,
    ViewBusyError,
    ViewStore,
    prefix_upper_bound,
)

# The primary key (view, org_id, key) is also the index that lists an organization in key order.
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS view_docs ("
    " view TEXT NOT NULL, org_id TEXT NOT NULL, key TEXT NOT NULL, doc TEXT NOT NULL,"
    " PRIMARY KEY (view, org_id, key)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS view_tracking ( view TEXT PRIMARY KEY, position INTEGER NOT NULL)",
)
# How long a waiting batch blocks on another writer before SQLite gives up.
_WAIT_TIMEOUT_MS = 60_000
# SQLite limits bound parameters per statement (32766 since 3.32); stay well below.
_CHUNK = 400
# `list_text` results each pooled connection keeps (see `SQLiteViewStore.list_text`).
_KEPT_TEXTS = 8


class SQLiteViewBatch(ViewBatch):
    """A batch inside `BEGIN IMMEDIATE`, so batches on one view database never interleave."""

    def __init__(self, store: SQLiteViewStore, view: str, *, wait: bool) -> None:
        self._store = store
        self._conn = store.acquire()
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {_WAIT_TIMEOUT_MS if wait else 0}")
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as e:
            store.release(self._conn)
            if "locked" in str(e) or "busy" in str(e):
                raise ViewBusyError(view) from e
            raise
        try:
            position = _read_position(self._conn, view)
        except BaseException:
            self._conn.rollback()
            store.release(self._conn)
            raise
        super().__init__(view, position)

    def _load(self, keys: DocKeys) -> dict[DocKey, Doc]:
        found: dict[DocKey, Doc] = {}
        for i in range(0, len(keys), _CHUNK):
            chunk = keys[i : i + _CHUNK]
            where = " OR ".join(["(org_id = ? AND key = ?)"] * len(chunk))
            params: list[str] = [self.view]
            for org_id, key in chunk:
                params += [org_id, key]
            rows = self._conn.execute(
                f"SELECT org_id, key, doc FROM view_docs WHERE view = ? AND ({where})",  # noqa: S608
                params,
            )
            for org_id, key, doc in rows:
                found[(org_id, key)] = json.loads(doc)
        return found

    def _load_prefix(self, org_id: str, prefix: str) -> Iterator[tuple[str, Doc]]:
        return _select_list(self._conn, self.view, org_id, prefix=prefix)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if exc_type is None:
                self._flush()
                self._conn.commit()
            else:
                self._conn.rollback()
        except BaseException:
            self._conn.rollback()
            raise
        finally:
            self._store.release(self._conn)

    def _flush(self) -> None:
        if _read_position(self._conn, self.view) != self.start_position:
            raise ConcurrentApplyError(self.view)
        upserts, deletes = self.changes()
        self._conn.executemany(
            "INSERT INTO view_docs (view, org_id, key, doc) VALUES (?, ?, ?, ?)"
            " ON CONFLICT (view, org_id, key) DO UPDATE SET doc = excluded.doc",
            [(self.view, *row) for row in upserts],
        )
        self._conn.executemany(
            "DELETE FROM view_docs WHERE view = ? AND org_id = ? AND key = ?",
            [(self.view, *k) for k in deletes],
        )
        if self.position != self.start_position:
            self._conn.execute(
                "INSERT INTO view_tracking (view, position) VALUES (?, ?)"
                " ON CONFLICT (view) DO UPDATE SET position = excluded.position",
                (self.view, self.position),
            )


class SQLiteBulkWriter(BulkWriter):
    """One `BEGIN IMMEDIATE` transaction (the view database's write lock) for the whole rebuild."""

    def __init__(self, store: SQLiteViewStore, views: Sequence[str]) -> None:
        self._store = store
        self._conn = store.acquire()
        try:
            self._conn.execute(f"PRAGMA busy_timeout = {_WAIT_TIMEOUT_MS}")
            self._conn.execute("BEGIN IMMEDIATE")
        except BaseException:
            store.release(self._conn)
            raise
        try:
            for view in views:
                self._conn.execute("DELETE FROM view_docs WHERE view = ?", (view,))
                self._conn.execute("DELETE FROM view_tracking WHERE view = ?", (view,))
        except BaseException:
            self.rollback()
            raise

    def write(self, view: str, documents: Iterable[DocText]) -> None:
        self._conn.executemany(
            "INSERT INTO view_docs (view, org_id, key, doc) VALUES (?, ?, ?, ?)",
            ((view, *row) for row in documents),
        )

    def commit(self, positions: dict[str, int]) -> None:
        try:
            self._conn.executemany(
                "INSERT INTO view_tracking (view, position) VALUES (?, ?)",
                [(v, p) for v, p in positions.items() if p > 0],
            )
            self._conn.commit()
        except BaseException:
            self._conn.rollback()
            raise
        finally:
            self._store.release(self._conn)

    def rollback(self) -> None:
        try:
            self._conn.rollback()
        finally:
            self._store.release(self._conn)


def _read_position(conn: sqlite3.Connection, view: str) -> int:
    row = conn.execute("SELECT position FROM view_tracking WHERE view = ?", (view,)).fetchone()
    return int(row[0]) if row else 0


def _select_list(
    conn: sqlite3.Connection,
    view: str,
    org_id: str,
    *,
    prefix: str,
    after: str | None = None,
    limit: int | None = None,
) -> Iterator[tuple[str, Doc]]:
    for key, doc in _select_text(conn, view, org_id, prefix=prefix, after=after, limit=limit):
        yield key, json.loads(doc)


def _where(
    view: str, org_id: str, prefix: str, *, after: str | None = None
) -> tuple[str, list[Any]]:
    """FROM ... WHERE ... ORDER BY key for an organization's documents by prefix (and after)."""
    sql = "FROM view_docs WHERE view = ? AND org_id = ?"
    params: list[Any] = [view, org_id]
    if prefix:
        sql += " AND key >= ?"
        params.append(prefix)
    upper = prefix_upper_bound(prefix)
    if upper is not None:
        sql += " AND key < ?"
        params.append(upper)
    if after is not None:
        sql += " AND key > ?"
        params.append(after)
    return sql + " ORDER BY key", params


def _select_text(
    conn: sqlite3.Connection,
    view: str,
    org_id: str,
    *,
    prefix: str,
    after: str | None = None,
    limit: int | None = None,
) -> list[tuple[str, str]]:
    where, params = _where(view, org_id, prefix, after=after)
    sql = f"SELECT key, doc {where}"
    if limit is not None:
        sql += " LIMIT ?"
        params.append(limit)
    rows: list[tuple[str, str]] = conn.execute(sql, params).fetchall()
    return rows


class SQLiteViewStore(ViewStore):
    """Views in a SQLite file (WAL); a small pool of connections serves reads and batches."""

    local_reads = True  # WAL: a read never waits for a writer

    def __init__(self, path: str) -> None:
        self.path = path
        self._pool: queue.SimpleQueue[sqlite3.Connection] = queue.SimpleQueue()
        self._all: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        # Per connection: (view, org_id, prefix) -> (the database's version as that connection
        # last saw it, the rows read then). Only the thread holding a connection touches its map.
        self._texts: dict[sqlite3.Connection, dict[tuple[str, str, str], tuple[Any, KeyedTexts]]]
        self._texts = {}
        conn = self.acquire()
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            for statement in _SCHEMA:
                conn.execute(statement)
        finally:
            self.release(conn)

    def acquire(self) -> sqlite3.Connection:
        """A pooled connection in autocommit mode (batches issue BEGIN themselves)."""
        try:
            return self._pool.get_nowait()
        except queue.Empty:
            pass
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False, timeout=60)
        conn.execute("PRAGMA synchronous = NORMAL")
        with self._lock:
            self._all.append(conn)
        return conn

    def release(self, conn: sqlite3.Connection) -> None:
        """Return a connection to the pool."""
        self._pool.put(conn)

    @contextmanager
    def _reading(self) -> Iterator[sqlite3.Connection]:
        conn = self.acquire()
        try:
            yield conn
        finally:
            self.release(conn)

    def get(self, view: str, org_id: str, key: str) -> Doc | None:
        with self._reading() as conn:
            row = conn.execute(
                "SELECT doc FROM view_docs WHERE view = ? AND org_id = ? AND key = ?",
                (view, org_id, key),
            ).fetchone()
        return None if row is None else dict(json.loads(row[0]))

    def list(
        self,
        view: str,
        org_id: str,
        prefix: str = "",
        after: str | None = None,
        limit: int | None = None,
    ) -> KeyedDocs:
        with self._reading() as conn:
            return list(_select_list(conn, view, org_id, prefix=prefix, after=after, limit=limit))

    def list_text(self, view: str, org_id: str, prefix: str = "") -> KeyedTexts:
        """Read again only when the database may have changed: `PRAGMA data_version` changes
        once any other connection (this process's or another's) has committed, and the
        connection's `total_changes` once it wrote itself. The version is read before the rows,
        so rows kept under a version are never older than it; an unchanged version means the
        database is as it was when they were read. The same text objects come back, which the
        run list's cache of decoded documents (api.run_list) then hashes and compares for free:
        reading and hashing 100 run documents' texts (~8 MB) was ~15% of `GET /v1/runs` on SQLite
        (bench/api_load.py profile)."""
        with self._reading() as conn:
            version = (conn.execute("PRAGMA data_version").fetchone()[0], conn.total_changes)
            kept = self._texts.setdefault(conn, {})
            key = (view, org_id, prefix)
            found = kept.get(key)
            if found is not None and found[0] == version:
                return list(found[1])
            rows = _select_text(conn, view, org_id, prefix=prefix)
            kept.pop(key, None)
            while len(kept) >= _KEPT_TEXTS:
                del kept[next(iter(kept))]
            kept[key] = (version, rows)
            return list(rows)

    def list_json_lines(self, view: str, org_id: str, prefix: str) -> bytes:
        # Joined by SQLite, as bytes: for 334,000 bill documents (an export's), fetching one
        # str per document, joining and encoding them took 2-3x the CPU of this. The subquery's
        # ORDER BY keeps key order (SQLite does not flatten it into the aggregate).
        where, params = _where(view, org_id, prefix)
        sql = f"SELECT CAST(group_concat(doc, char(10)) AS BLOB) FROM (SELECT doc {where})"  # noqa: S608 - only ? marks
        with self._reading() as conn:
            row = conn.execute(sql, params).fetchone()
        return bytes(row[0] or b"")

    def iter_all(self, view: str) -> Iterator[tuple[str, str, Doc]]:
        with self._reading() as conn:
            rows = conn.execute(
                "SELECT org_id, key, doc FROM view_docs WHERE view = ? ORDER BY org_id, key",
                (view,),
            ).fetchall()
        for org_id, key, doc in rows:
            yield org_id, key, json.loads(doc)

    def position(self, view: str) -> int:
        with self._reading() as conn:
            return _read_position(conn, view)

    def batch(self, view: str, *, wait: bool = True) -> SQLiteViewBatch:
        return SQLiteViewBatch(self, view, wait=wait)

    def replace_views(self, views: Sequence[str]) -> SQLiteBulkWriter:
        return SQLiteBulkWriter(self, views)

    def reset(self, view: str) -> None:
        with self._reading() as conn:
            conn.execute(f"PRAGMA busy_timeout = {_WAIT_TIMEOUT_MS}")
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute("DELETE FROM view_docs WHERE view = ?", (view,))
                conn.execute("DELETE FROM view_tracking WHERE view = ?", (view,))
            except BaseException:
                conn.rollback()
                raise
            conn.commit()

    def close(self) -> None:
        with self._lock:
            for conn in self._all:
                conn.close()
            self._all.clear()
            self._texts.clear()
