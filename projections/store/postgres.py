"""The PostgreSQL view store: JSON documents, one advisory lock per view for writers.

The documents' column is `json`: PostgreSQL keeps the text written and sends it back as it is.
`jsonb` (what tables an earlier version made have, and keep: every statement here works on
both) parses each document into its binary form on write and prints it back on every read,
which cost 20% of a rebuild's COPY and a third of PostgreSQL's CPU per API read
(bench/projection_rebuild.py's write floor, bench/api_load.py's `PG ms`). Nothing here
needs jsonb's operators on the column; a filter on a value casts that value to jsonb.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack
from functools import partial
from types import TracebackType
from typing import Any, TypeVar
from weakref import WeakKeyDictionary

from psycopg import Connection, Cursor, Rollback
from psycopg.rows import TupleRow, tuple_row
from psycopg.sql import SQL, Composable, Identifier
from psycopg_pool import ConnectionPool, PoolTimeout

from projections.store.base import (
    BulkWriter,
    ConcurrentApplyError,
    Doc,
    DocKey,
    DocKeys,
    DocText,
    Follow,
    KeyedDocs,
    KeyedTexts,
    Upserts,
    ViewBatch,
    ViewBusyError,
    ViewStore,
    prefix_upper_bound,
)
from projections.store.lru import Lru
from projections.store.on_loop import LoopWaiting, run_on_loop
from projections.store.pg import (
    any_pinned,
    create_tables,
    fast_json,
    one_connection,
    open_pool,
    pinned_to,
    quoted,
    read_pinned,
    reading,
)

R = TypeVar("R")
# How long a read on the event loop may wait for a free connection before it goes to a thread
# instead (the wait blocks the loop: only a connection coming back right now is worth it).
LOOP_CONNECTION_WAIT_S = 0.001

# Listings kept per process (`PostgresViewStore._kept_listing`): how many, and the largest kept
# (a runs list of 100 runs is ~150 KB; a billing export's listing is read afresh): <= 64 MB.
KEPT_LISTINGS = 128
KEEP_LISTING_CHARS = 512 * 1024


class _Names:
    """Quoted table names and the advisory-lock namespace of one store."""

    def __init__(self, schema: str, table_prefix: str) -> None:
        self.schema = schema
        self.namespace = f"tensorant-view:{schema}.{table_prefix}"
        self.docs = SQL("{}.{}").format(Identifier(schema), Identifier(f"{table_prefix}view_docs"))
        self.tracking = SQL("{}.{}").format(
            Identifier(schema), Identifier(f"{table_prefix}view_tracking")
        )
        # The reads' statements as plain text, quoted once (`projections.store.pg.quoted`).
        self.get_text = quoted(
            SQL("SELECT doc FROM {} WHERE view = %s AND org_id = %s AND key = %s").format(self.docs)
        )
        self.get_many_text = quoted(
            SQL("SELECT key, doc FROM {} WHERE view = %s AND org_id = %s AND key = ANY(%s)").format(
                self.docs
            )
        )
        # A document and the one it names (`Follow`), by the primary key of each: one round trip.
        self.get_followed_text = quoted(
            SQL(
                "SELECT a.doc, b.doc FROM {} a LEFT JOIN {} b ON b.view = %s"
                " AND b.org_id = a.doc->>%s AND b.key = %s || (a.doc->>%s)"
                " WHERE a.view = %s AND a.org_id = %s AND a.key = %s"
            ).format(self.docs, self.docs)
        )
        self._texts: dict[tuple[bool, ...], bytes] = {}
        self._if_changed: dict[bytes, bytes] = {}

    def list_text(self, text: bool, prefix: bool, upper: bool, after: bool, limit: bool) -> bytes:
        """The list statement for these clauses, composed and quoted once."""
        shape = (text, prefix, upper, after, limit)
        found = self._texts.get(shape)
        if found is None:
            sql: Composable = SQL("SELECT key, {} FROM {} WHERE view = %s AND org_id = %s").format(
                SQL("doc::text" if text else "doc"), self.docs
            )
            for on, clause in zip(
                shape[1:4], (" AND key >= %s", " AND key < %s", " AND key > %s"), strict=True
            ):
                if on:
                    sql += SQL(clause)
            sql += SQL(" ORDER BY key")
            if limit:
                sql += SQL(" LIMIT %s")
            found = self._texts.setdefault(shape, quoted(sql))
        return found

    def list_where_text(self, prefix: bool, upper: bool) -> bytes:
        """`list_text` (these clauses) of documents whose JSON at a path is one of some values
        (given as JSON texts, compared as jsonb: only a string equals a string)."""
        shape = (True, prefix, upper, False, False, True)
        found = self._texts.get(shape)
        if found is None:
            sql: Composable = SQL(
                "SELECT key, doc::text FROM {} WHERE view = %s AND org_id = %s"
            ).format(self.docs)
            if prefix:
                sql += SQL(" AND key >= %s")
            if upper:
                sql += SQL(" AND key < %s")
            sql += SQL(" AND (doc #> %s::text[])::jsonb = ANY(%s::jsonb[]) ORDER BY key")
            found = self._texts.setdefault(shape, quoted(sql))
        return found

    def if_changed(self, listing: bytes) -> bytes:
        """`listing` (key, text rows) answered only when the view changed since a token: first
        a row (NULL, the view's token), then the listing's rows unless the token is the one
        given. One statement, so the token and the rows are of one snapshot. The token is the
        `xmin` of the view's tracking row: every batch that changes the view's documents
        rewrites that row in its transaction (`PostgresViewBatch`, `PostgresBulkWriter`)."""
        found = self._if_changed.get(listing)
        if found is None:
            token = SQL("SELECT xmin::text FROM {} WHERE view = %s").format(self.tracking)
            sql = SQL(
                "SELECT NULL, ({token}) UNION ALL SELECT * FROM ({listing}) AS listed"
                " WHERE ({token}) IS DISTINCT FROM %s"
            ).format(token=token, listing=SQL(listing.decode()))
            found = self._if_changed.setdefault(listing, quoted(sql))
        return found

    def lock_key(self, view: str) -> int:
        """A stable signed 64-bit advisory-lock key for a view."""
        raw = hashlib.sha256(f"{self.namespace}:{view}".encode()).digest()[:8]
        return int.from_bytes(raw, "big", signed=True)


def _range_params(view: str, org_id: str, prefix: str) -> tuple[list[Any], str | None]:
    """The parameters selecting an organization's keys of a view that start with `prefix`, and
    the prefix's upper bound (None: no bound, for "" or a prefix ending in U+10FFFF)."""
    params: list[Any] = [view, org_id]
    if prefix:
        params.append(prefix)
    upper = prefix_upper_bound(prefix)
    if upper is not None:
        params.append(upper)
    return params, upper


def _list_statement(
    names: _Names,
    view: str,
    org_id: str,
    *,
    prefix: str,
    after: str | None = None,
    limit: int | None = None,
    text: bool = False,
) -> tuple[bytes, list[Any]]:
    params, upper = _range_params(view, org_id, prefix)
    if after is not None:
        params.append(after)
    if limit is not None:
        params.append(limit)
    shape = (bool(prefix), upper is not None, after is not None, limit is not None)
    return names.list_text(text, *shape), params


def _select_list(
    cur: Cursor[TupleRow], statement: tuple[bytes, list[Any]]
) -> list[tuple[str, Any]]:
    """(key, doc) rows of a `_list_statement`; with its `text`, the document's JSON text
    (`doc::text`), not decoded."""
    cur.execute(*statement)
    return [(key, doc) for key, doc in cur.fetchall()]


def _read_position(cur: Cursor[TupleRow], names: _Names, view: str) -> int:
    cur.execute(SQL("SELECT position FROM {} WHERE view = %s").format(names.tracking), (view,))
    row = cur.fetchone()
    return int(row[0]) if row else 0


class PostgresViewBatch(ViewBatch):
    """A batch in one transaction holding `pg_advisory_xact_lock` on the view's key."""

    def __init__(self, store: PostgresViewStore, view: str, *, wait: bool) -> None:
        self._names = store.names
        self._stack = ExitStack()
        try:
            conn: Connection[Any] = self._stack.enter_context(store.pool.connection())
            # Pipeline mode: BEGIN, the lock and the position read go out together and cost one
            # round trip (they still run one after the other, each statement with its own
            # snapshot, so the position is read after the lock is held).
            self._stack.enter_context(conn.pipeline())
            self._stack.enter_context(conn.transaction())
            self._cur = self._stack.enter_context(conn.cursor(row_factory=tuple_row))
            key = self._names.lock_key(view)
            if wait:
                self._cur.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
                position = _read_position(self._cur, self._names, view)
            else:
                lock = conn.cursor(row_factory=tuple_row)
                lock.execute("SELECT pg_try_advisory_xact_lock(%s)", (key,))
                # Read whether or not the lock was granted (harmless), to save a round trip.
                position = _read_position(self._cur, self._names, view)
                row = lock.fetchone()
                lock.close()
                if not (row and row[0]):
                    raise ViewBusyError(view)
        except BaseException as e:
            self._stack.__exit__(type(e), e, e.__traceback__)
            raise
        super().__init__(view, position)

    def _load(self, keys: DocKeys) -> dict[DocKey, Doc]:
        self._cur.execute(
            SQL(
                "SELECT org_id, key, doc FROM {} WHERE view = %s AND (org_id, key) IN"
                " (SELECT * FROM unnest(%b::text[], %b::text[]))"
            ).format(self._names.docs),
            (self.view, [k[0] for k in keys], [k[1] for k in keys]),
            binary=True,
        )
        return {(org_id, key): doc for org_id, key, doc in self._cur.fetchall()}

    def _load_prefix(self, org_id: str, prefix: str) -> Iterator[tuple[str, Doc]]:
        return iter(
            _select_list(self._cur, _list_statement(self._names, self.view, org_id, prefix=prefix))
        )

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None:
            self._stack.__exit__(exc_type, exc, tb)
            return
        try:
            self._flush()
        except BaseException as e:
            self._stack.__exit__(type(e), e, e.__traceback__)
            raise
        self._stack.__exit__(None, None, None)

    def _flush(self) -> None:
        cur, names = self._cur, self._names
        upserts, deletes = self.changes()
        # Everything goes out in one pipeline sync: the position check, then one statement per
        # kind of change (unnest() over binary arrays beats executemany's round trips), then
        # the new position. A moved position is only seen after the writes were sent; raising
        # then rolls the whole transaction back, so nothing of this batch is committed.
        check = self._cur.connection.cursor(row_factory=tuple_row)
        check.execute(
            SQL("SELECT position FROM {} WHERE view = %s").format(names.tracking), (self.view,)
        )
        if upserts:
            _upsert(cur, names, self.view, upserts)
        if deletes:
            _delete(cur, names, self.view, deletes)
        # A change of documents rewrites the tracking row even at the same position: its xmin is
        # the token readers' kept lists are checked against (`_Names.if_changed`).
        if self.position != self.start_position or upserts or deletes:
            cur.execute(
                SQL(
                    "INSERT INTO {} (view, position) VALUES (%s, %s)"
                    " ON CONFLICT (view) DO UPDATE SET position = EXCLUDED.position"
                ).format(names.tracking),
                (self.view, self.position),
            )
        row = check.fetchone()
        check.close()
        if (int(row[0]) if row else 0) != self.start_position:
            raise ConcurrentApplyError(self.view)


def _upsert(cur: Cursor[TupleRow], names: _Names, view: str, upserts: Upserts) -> None:
    cur.execute(
        SQL(
            "INSERT INTO {} (view, org_id, key, doc)"
            " SELECT %s, o, k, d::json FROM unnest(%b::text[], %b::text[], %b::text[])"
            " AS u(o, k, d)"
            " ON CONFLICT (view, org_id, key) DO UPDATE SET doc = EXCLUDED.doc"
        ).format(names.docs),
        (view, *map(list, zip(*upserts, strict=True))),
        binary=True,
    )


def _delete(cur: Cursor[TupleRow], names: _Names, view: str, keys: DocKeys) -> None:
    cur.execute(
        SQL(
            "DELETE FROM {} WHERE view = %s AND (org_id, key) IN"
            " (SELECT * FROM unnest(%b::text[], %b::text[]))"
        ).format(names.docs),
        (view, [k[0] for k in keys], [k[1] for k in keys]),
        binary=True,
    )


class PostgresBulkWriter(BulkWriter):
    """One transaction holding the views' advisory locks; new documents go in with COPY."""

    def __init__(self, store: PostgresViewStore, views: Sequence[str]) -> None:
        self._names = names = store.names
        self._stack = ExitStack()
        try:
            self._conn: Connection[Any] = self._stack.enter_context(store.pool.connection())
            self._stack.enter_context(self._conn.transaction())
            with self._conn.cursor(row_factory=tuple_row) as cur:
                # The transaction sits idle while the log is read (the documents are written
                # at the end, in key order), and each view is one COPY: a server's timeouts
                # for idle transactions and long statements must not end the rebuild.
                cur.execute("SET LOCAL idle_in_transaction_session_timeout = 0")
                cur.execute("SET LOCAL statement_timeout = 0")
                for key in sorted({names.lock_key(v) for v in views}):
                    cur.execute("SELECT pg_advisory_xact_lock(%s)", (key,))
                for table in (names.docs, names.tracking):
                    cur.execute(
                        SQL("DELETE FROM {} WHERE view = ANY(%s)").format(table), (list(views),)
                    )
                # A `json` column takes COPY's binary rows: each document's text as it is,
                # without the text format's escaping and PostgreSQL's scan for it (~9% less
                # of its CPU and half of psycopg's on the 1.08M documents of
                # bench/projection_rebuild.py). A `jsonb` one reads a version byte first.
                cur.execute(
                    "SELECT atttypid = 'json'::regtype FROM pg_attribute"
                    " WHERE attrelid = %s::regclass AND attname = 'doc'",
                    (names.docs.as_string(self._conn),),
                )
                found = cur.fetchone()
                self._binary = bool(found and found[0])
        except BaseException as e:
            self._stack.__exit__(type(e), e, e.__traceback__)
            raise

    def write(self, view: str, documents: Iterable[DocText]) -> None:
        statement = SQL("COPY {} (view, org_id, key, doc) FROM STDIN").format(self._names.docs)
        if self._binary:
            statement += SQL(" (FORMAT BINARY)")
        with self._conn.cursor(row_factory=tuple_row) as cur, cur.copy(statement) as copy:
            if self._binary:
                copy.set_types(["text", "text", "text", "text"])  # the json's text
            write_row = copy.write_row
            for org_id, key, doc in documents:
                write_row((view, org_id, key, doc))

    def commit(self, positions: dict[str, int]) -> None:
        try:
            moved = [(v, p) for v, p in positions.items() if p > 0]
            if moved:
                self._conn.execute(
                    SQL(
                        "INSERT INTO {} (view, position) SELECT * FROM unnest(%s::text[],"
                        " %s::bigint[])"
                    ).format(self._names.tracking),
                    ([v for v, _ in moved], [p for _, p in moved]),
                )
        except BaseException as e:
            self._stack.__exit__(type(e), e, e.__traceback__)
            raise
        self._stack.__exit__(None, None, None)

    def rollback(self) -> None:
        self._stack.__exit__(Rollback, Rollback(), None)


class PostgresViewStore(ViewStore):
    """Views in PostgreSQL tables `<prefix>view_docs` and `<prefix>view_tracking` in `schema`."""

    def __init__(
        self,
        conninfo_or_pool: str | ConnectionPool[Any],
        *,
        schema: str = "public",
        table_prefix: str = "",
        max_size: int = 8,
    ) -> None:
        if isinstance(conninfo_or_pool, str):
            self.pool: ConnectionPool[Any] = open_pool(
                conninfo_or_pool,
                max_size=max_size,
                configure=fast_json,
                connection_class=LoopWaiting,
            )
            self._owns_pool = True
        else:
            self.pool = conninfo_or_pool
            self._owns_pool = False
        # Reads awaited on the event loop (`read_async`) hold at most half the pool: whatever
        # else waits for a connection on the loop finds one freed by a thread, never one only
        # a suspended read could give back.
        self._loop_reads = issubclass(self.pool.connection_class, LoopWaiting)
        self._loop_slots: WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
            WeakKeyDictionary()
        )
        self._loop_slot_count = max(1, max_size // 2)
        self.names = _Names(schema, table_prefix)
        # Listings kept with their view's token (`_kept_listing`): texts handed out are shared.
        self._kept: Lru[Hashable, tuple[str, KeyedTexts]] = Lru(KEPT_LISTINGS)
        self._create_tables()

    def _create_tables(self) -> None:
        n = self.names
        create_tables(
            self.pool,
            n.schema,
            [
                SQL(
                    'CREATE TABLE IF NOT EXISTS {} (view text COLLATE "C" NOT NULL,'
                    ' org_id text COLLATE "C" NOT NULL, key text COLLATE "C" NOT NULL,'
                    " doc json NOT NULL, PRIMARY KEY (view, org_id, key))"
                ).format(n.docs),
                SQL(
                    "CREATE TABLE IF NOT EXISTS {} (view text PRIMARY KEY,"
                    " position bigint NOT NULL)"
                ).format(n.tracking),
            ],
        )

    def get(self, view: str, org_id: str, key: str) -> Doc | None:
        with self._reading() as conn, conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(self.names.get_text, (view, org_id, key))
            row = cur.fetchone()
        return None if row is None else dict(row[0])

    def get_many(self, view: str, org_id: str, keys: Sequence[str]) -> dict[str, Doc]:
        with self._reading() as conn, conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(self.names.get_many_text, (view, org_id, list(keys)))
            return {key: dict(doc) for key, doc in cur.fetchall()}

    def get_followed(
        self, view: str, org_id: str, key: str, follow: Follow
    ) -> tuple[Doc | None, Doc | None]:
        params = (follow.view, follow.org_field, follow.key_prefix, follow.key_field)
        with self._reading() as conn, conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(self.names.get_followed_text, (*params, view, org_id, key))
            row = cur.fetchone()
        if row is None:
            return None, None
        return dict(row[0]), None if row[1] is None else dict(row[1])

    def get_followed_later(
        self, view: str, org_id: str, key: str, follow: Follow
    ) -> Callable[[], tuple[Doc | None, Doc | None]]:
        pinned = pinned_to(self.pool)
        if pinned is None:
            return super().get_followed_later(view, org_id, key, follow)
        params = (follow.view, follow.org_field, follow.key_prefix, follow.key_field)
        rows = pinned.later(self.names.get_followed_text, (*params, view, org_id, key))

        def answer() -> tuple[Doc | None, Doc | None]:
            found = rows()
            if not found:
                return None, None
            a, b = found[0]
            return dict(a), None if b is None else dict(b)

        return answer

    def get_later(self, view: str, org_id: str, key: str) -> Callable[[], Doc | None]:
        pinned = pinned_to(self.pool)
        if pinned is None:
            return super().get_later(view, org_id, key)
        rows = pinned.later(self.names.get_text, (view, org_id, key))

        def answer() -> Doc | None:
            found = rows()
            return dict(found[0][0]) if found else None

        return answer

    def get_many_later(
        self, view: str, org_id: str, keys: Sequence[str]
    ) -> Callable[[], dict[str, Doc]]:
        pinned = pinned_to(self.pool)
        if pinned is None:
            return super().get_many_later(view, org_id, keys)
        rows = pinned.later(self.names.get_many_text, (view, org_id, list(keys)))
        return lambda: {key: dict(doc) for key, doc in rows()}

    def list_later(self, view: str, org_id: str, prefix: str = "") -> Callable[[], KeyedDocs]:
        pinned = pinned_to(self.pool)
        if pinned is None:
            return super().list_later(view, org_id, prefix)
        rows = pinned.later(*_list_statement(self.names, view, org_id, prefix=prefix))
        return lambda: [(key, doc) for key, doc in rows()]

    def one_connection(self) -> AbstractContextManager[None]:
        return one_connection(self.pool)

    async def read_async(self, read: Callable[..., R], *args: Any) -> R:
        """`read(*args)` on the event loop, its reads on one pinned connection whose round
        trips the loop awaits (`projections.store.on_loop`): no hand-off to a thread. When no
        connection is free at once (the pool is busy or still growing), in a worker thread."""
        if not self._loop_reads or any_pinned() is not None:
            return await super().read_async(read, *args)
        loop = asyncio.get_running_loop()
        slots = self._loop_slots.get(loop)
        if slots is None:
            slots = self._loop_slots.setdefault(loop, asyncio.Semaphore(self._loop_slot_count))
        async with slots:
            try:
                conn = self.pool.getconn(timeout=LOOP_CONNECTION_WAIT_S)
            except PoolTimeout:
                return await super().read_async(read, *args)
            try:
                return await run_on_loop(read_pinned, self.pool, conn, partial(read, *args))
            finally:
                self.pool.putconn(conn)

    def _reading(self) -> AbstractContextManager[Connection[Any]]:
        return reading(self.pool)

    def list(
        self,
        view: str,
        org_id: str,
        prefix: str = "",
        after: str | None = None,
        limit: int | None = None,
    ) -> KeyedDocs:
        with self._reading() as conn, conn.cursor(row_factory=tuple_row) as cur:
            statement = _list_statement(
                self.names, view, org_id, prefix=prefix, after=after, limit=limit
            )
            return _select_list(cur, statement)

    def list_text(self, view: str, org_id: str, prefix: str = "") -> KeyedTexts:
        statement, params = _list_statement(self.names, view, org_id, prefix=prefix, text=True)
        return self._kept_listing((view, org_id, prefix), statement, params)

    def list_text_where(
        self, view: str, org_id: str, prefix: str, path: Sequence[str], values: Sequence[str]
    ) -> KeyedTexts:
        if not values:
            return []
        params, upper = _range_params(view, org_id, prefix)
        statement = self.names.list_where_text(bool(prefix), upper is not None)
        params += [list(path), [json.dumps(v) for v in values]]
        kept = (view, org_id, prefix, tuple(path), tuple(values))
        return self._kept_listing(kept, statement, params)

    def _kept_listing(self, kept: Hashable, statement: bytes, params: Sequence[Any]) -> KeyedTexts:
        """A listing's (key, text) rows, kept per process with the view's token: when the view
        has not changed since, the statement sends back the token alone and the kept rows are
        the answer (as the embedded store keeps them per database change). A change to any of
        the view's documents changes the token, so kept rows are never older than the view."""
        found = self._kept.get(kept)
        view = str(params[0])
        with self._reading() as conn, conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(
                self.names.if_changed(statement),
                [view, *params, view, found[0] if found else ""],
            )
            rows = cur.fetchall()
        # The token's row is the one without a key (a document always has one), wherever a
        # plan puts it; the documents are put in key order here for the same reason.
        token = next((text for key, text in rows if key is None), None)
        if found is not None and token == found[0]:
            return found[1]
        listed: KeyedTexts = sorted((key, text) for key, text in rows if key is not None)
        if token is not None and sum(len(t) for _, t in listed) <= KEEP_LISTING_CHARS:
            self._kept.put(kept, (token, listed))
        return listed

    def iter_all(self, view: str) -> Iterator[tuple[str, str, Doc]]:
        with (
            self.pool.connection() as conn,
            conn.transaction(),
            conn.cursor("view_iter_all", row_factory=tuple_row) as cur,
        ):
            cur.itersize = 5000
            cur.execute(
                SQL("SELECT org_id, key, doc FROM {} WHERE view = %s ORDER BY org_id, key").format(
                    self.names.docs
                ),
                (view,),
            )
            yield from cur

    def position(self, view: str) -> int:
        with self._reading() as conn, conn.cursor(row_factory=tuple_row) as cur:
            return _read_position(cur, self.names, view)

    def batch(self, view: str, *, wait: bool = True) -> PostgresViewBatch:
        return PostgresViewBatch(self, view, wait=wait)

    def replace_views(self, views: Sequence[str]) -> PostgresBulkWriter:
        return PostgresBulkWriter(self, views)

    def reset(self, view: str) -> None:
        n = self.names
        with self.pool.connection() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (n.lock_key(view),))
            conn.execute(SQL("DELETE FROM {} WHERE view = %s").format(n.docs), (view,))
            conn.execute(SQL("DELETE FROM {} WHERE view = %s").format(n.tracking), (view,))

    def close(self) -> None:
        if self._owns_pool:
            self.pool.close()
