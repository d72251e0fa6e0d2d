"""The PostgreSQL kernel under our stores: what the view store (`projections.store.postgres`)
and the stores beside the log (`adapters.logstore`, `adapters.vault`, the broker's dedupe
table) would otherwise each write again.

- Pools in autocommit (`open_pool`): a read is one statement and one round trip, not BEGIN,
  SELECT, COMMIT (three, profiled under bench/api_load.py); a write opens its own
  `conn.transaction()`.
- Tables created under one lock (`create_tables`, `take_ddl_lock`): PostgreSQL's `CREATE ...
  IF NOT EXISTS` is not safe against a concurrent twin (the loser can get "relation already
  exists", a duplicate key on a catalog index, or "tuple concurrently updated"; a worker died
  at start so in a CI run), so first starts of several processes take turns.
- Statements quoted once (`quoted`): psycopg converts a composed query on every execute (a
  third of a view read's CPU under load, py-spy), but caches a text query's conversion and
  prepares it after a few runs.
- Reads that share one connection (`one_connection`, `reading`, `Pinned.later`): a request's
  reads of the views and of the trainer's reports go out together, in one round trip.
- Documents decoded by orjson (`fast_json`).
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import Any, Self, TypeVar
from weakref import WeakKeyDictionary

import orjson
from psycopg import ClientCursor, Connection, Cursor, errors
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Composable, Identifier
from psycopg.types.json import set_json_loads
from psycopg_pool import ConnectionPool

from projections.store.lru import Lru

R = TypeVar("R")

# One key for every table our stores create (any schema): the DDL is short and rare.
DDL_LOCK_KEY = 0x7465_6E73_6464_6C00  # "tensddl\0"


def take_ddl_lock(execute: Any) -> None:
    """Hold the DDL lock until the caller's transaction ends (it must be in one: under
    autocommit the lock would end with this statement)."""
    execute(f"SELECT pg_advisory_xact_lock({DDL_LOCK_KEY})")


def open_pool(
    conninfo: str,
    *,
    max_size: int,
    min_size: int = 1,
    configure: Callable[[Connection[Any]], None] | None = None,
    connection_class: type[Connection[Any]] = Connection,
) -> ConnectionPool[Any]:
    """An open pool of autocommit connections (`configure` runs on each new one)."""
    return ConnectionPool(
        conninfo,
        connection_class=connection_class,
        configure=configure,
        min_size=min_size,
        max_size=max_size,
        kwargs={"autocommit": True},
        open=True,
    )


def create_tables(pool: ConnectionPool[Any], schema: str, tables: Iterable[Composable]) -> None:
    """`schema` and each `CREATE TABLE IF NOT EXISTS` of `tables`, in one transaction that
    holds the DDL lock."""
    with pool.connection() as conn, conn.transaction():
        take_ddl_lock(conn.execute)
        conn.execute(SQL("CREATE SCHEMA IF NOT EXISTS {}").format(Identifier(schema)))
        for table in tables:
            conn.execute(table)


def quoted(query: Composable) -> bytes:
    """`query` as the text psycopg sends, quoted once (module docstring)."""
    text: str = query.as_string()
    return text.encode()


class _Waiting:
    """A read sent with the next one (`Pinned.later`), and its rows once they came back."""

    def __init__(self, query: bytes, params: Sequence[Any], args: bytes | None) -> None:
        self.query = query
        self.params = params
        self.args = args
        self.rows: list[Any] | None = None


class Pinned:
    """The connection a context's reads share (`one_connection`) and the reads waiting to be
    sent with the next one."""

    def __init__(self, pool: ConnectionPool[Any], conn: Connection[Any]) -> None:
        self.pool = pool
        self.conn = conn
        self.waiting: list[_Waiting] = []

    def later(
        self, query: bytes, params: Sequence[Any], args: bytes | None = None
    ) -> Callable[[], list[Any]]:
        """Hold a read until the next query on this connection, which sends both in one
        round trip; calling what this returns gives its rows (sending it alone if no other
        query went meanwhile, or that one failed). `args`: `params` already bound as the
        `(...)` of an EXECUTE, for parameters a caller sends again and again (a list's ids)."""
        waiting = _Waiting(query, params, args)
        self.waiting.append(waiting)

        def rows() -> list[Any]:
            if waiting.rows is None:
                if waiting in self.waiting:
                    self.waiting.remove(waiting)
                with self.conn.cursor(row_factory=tuple_row) as cur:
                    waiting.rows = cur.execute(query, params).fetchall()
            return waiting.rows

        return rows


_PINNED: ContextVar[Pinned | None] = ContextVar("tensorant_pg_pinned", default=None)


def any_pinned() -> Pinned | None:
    """What `one_connection` pinned in this context, to any database."""
    return _PINNED.get()


class _SendsWaiting(Cursor[Any]):
    """The pinned connection's cursor: a query goes out with the reads waiting before it
    (`Pinned.later`) as one multi-statement text, so their answers come back in the same
    round trip. Multiple statements need their parameters bound client-side (`mogrify`);
    a query with nothing waiting is sent as any other (prepared after a few runs). psycopg's
    pipeline mode measured slower for this: a sync per fetch, and one more on leaving it."""

    def execute(
        self, query: Any, params: Any = None, *, prepare: bool | None = None, binary: Any = None
    ) -> Self:
        pinned = _PINNED.get()
        if pinned is None or pinned.conn is not self.connection or not pinned.waiting:
            return super().execute(query, params, prepare=prepare, binary=binary)
        waiting, pinned.waiting = pinned.waiting, []
        text = query.as_string(self.connection) if isinstance(query, Composable) else query
        text = text.encode() if isinstance(text, str) else text
        values = list(params or ())
        for attempt in (1, 2):
            with ClientCursor(self.connection) as binder:
                joined = b"; ".join(
                    [
                        *(
                            _executable(self.connection, binder, w.query, w.params, w.args)
                            for w in waiting
                        ),
                        _executable(self.connection, binder, text, values),
                    ]
                )
            try:
                super().execute(joined)  # no parameters: one simple query, many results
                break
            except errors.InvalidSqlStatementName:
                # the session lost its prepared statements (DISCARD ALL, DEALLOCATE): again
                with _PREPARED_LOCK:
                    _PREPARED.pop(self.connection, None)
                if attempt == 2:
                    raise
        for w in waiting:
            w.rows = self.fetchall()
            self.nextset()
        return self


# Per connection: statement text -> the name it is prepared under there (None: sent as text).
_PREPARED: WeakKeyDictionary[Connection[Any], dict[bytes, bytes | None]] = WeakKeyDictionary()
_PREPARED_LOCK = threading.Lock()
MAX_PREPARED_PER_CONNECTION = 128
_MARK = re.compile(rb"%(.)", re.S)


def _executable(
    conn: Connection[Any],
    binder: ClientCursor[Any],
    text: bytes,
    params: Sequence[Any],
    args: bytes | None = None,
) -> bytes:
    """One statement of a multi-statement text: `EXECUTE` of the statement prepared on this
    connection, its parameters bound as literals, so PostgreSQL plans it once per connection
    rather than once per request (a simple query's statements are parsed and planned every
    time: the token check's join alone took 0.15 ms to plan, more than running it); the
    statement with its literals when it cannot be prepared."""
    name = _prepared_name(conn, text) if params else None
    if name is None:
        return binder.mogrify(text, params).encode()
    if args is None:
        args = _bound_args(binder, params)
    return b"EXECUTE " + name + args


# Parameters bound as an EXECUTE's `(...)`, by their values: a request's held-back reads bind
# the same values request after request (a token's hash, an organization and its keys), and
# binding them client-side was a fifth of a view read's CPU (cProfile, GET /v1/connections).
_BOUND: Lru[tuple[Hashable, ...], bytes] = Lru(4096)
_HASHABLE = (str, int, bool, type(None))


def _bound_args(binder: ClientCursor[Any], params: Sequence[Any]) -> bytes:
    key: list[Hashable] = []
    for p in params:
        if isinstance(p, list) and all(type(v) is str for v in p):
            key.append(tuple(p))
        elif type(p) in _HASHABLE:
            key.append((type(p), p))  # 1 and True bind differently
        else:
            key = []
            break
    cached = tuple(key) if key else None
    if cached is not None and (found := _BOUND.get(cached)) is not None:
        return found
    args = b"(" + binder.mogrify(", ".join(["%s"] * len(params)), params).encode() + b")"
    if cached is not None:
        _BOUND.put(cached, args)
    return args


def _numbered(text: bytes) -> bytes | None:
    """`text` with psycopg's `%s` marks as PREPARE's `$1, $2, ...`; None for any other mark."""
    n = 0

    def number(m: re.Match[bytes]) -> bytes:
        nonlocal n
        if m.group(1) == b"%":
            return b"%"
        if m.group(1) != b"s":
            raise ValueError
        n += 1
        return b"$%d" % n

    try:
        return _MARK.sub(number, text)
    except ValueError:
        return None


def _prepared_name(conn: Connection[Any], text: bytes) -> bytes | None:
    """The name `text` is prepared under on `conn`, preparing it the first time (its own round
    trip, once per connection); None if PostgreSQL refuses it or the connection holds enough."""
    with _PREPARED_LOCK:
        known = _PREPARED.setdefault(conn, {})
        if text in known:
            return known[text]
        if len(known) >= MAX_PREPARED_PER_CONNECTION:
            return None
    if not conn.autocommit or conn.info.transaction_status != TransactionStatus.IDLE:
        return None  # a refused PREPARE would abort the transaction it is in
    numbered = _numbered(text)
    name: bytes | None = None
    if numbered is not None:
        name = b"tensorant_" + hashlib.sha1(text).hexdigest()[:20].encode()  # noqa: S324 - a name
        try:
            with Cursor(conn) as cur:
                cur.execute(b"PREPARE " + name + b" AS " + numbered)
        except errors.DuplicatePreparedStatement:
            pass  # prepared on this connection before (the same text, the same name)
        except errors.Error:
            name = None  # a parameter whose type PostgreSQL cannot infer: sent as text
    with _PREPARED_LOCK:
        known[text] = name
    return name


def pinned_to(pool: ConnectionPool[Any]) -> Pinned | None:
    """What `one_connection` pinned in this context to `pool`'s database, if anything."""
    pinned = _PINNED.get()
    if pinned is None or pinned.pool.conninfo != pool.conninfo:
        return None
    return pinned


def reading(pool: ConnectionPool[Any]) -> AbstractContextManager[Connection[Any]]:
    """A connection for a read: the pinned one of the same database (`pinned_to`), else one
    from `pool`. Only reads take it: a write opens its own transaction on its own pool."""
    pinned = pinned_to(pool)
    return pool.connection() if pinned is None else nullcontext(pinned.conn)


@contextmanager
def one_connection(pool: ConnectionPool[Any]) -> Iterator[None]:
    """Pin one connection of `pool` for the reads of this context, for every store on the same
    database (the views and the trainer reports): a read held back (`Pinned.later`) goes out
    with the next query. A block inside another keeps the outer connection."""
    if _PINNED.get() is not None:
        yield
        return
    with pool.connection() as conn, _pinned(pool, conn):
        yield


@contextmanager
def _pinned(pool: ConnectionPool[Any], conn: Connection[Any]) -> Iterator[None]:
    factory = conn.cursor_factory
    conn.cursor_factory = _SendsWaiting
    token = _PINNED.set(Pinned(pool, conn))
    try:
        yield
    finally:
        _PINNED.reset(token)
        conn.cursor_factory = factory


def fast_json(conn: Connection[Any]) -> None:
    """Documents (json or jsonb) decoded by orjson, ~3x the standard library's speed (a quarter of a
    view read's CPU was `json.loads`, cProfile). orjson reads JSON to the same values except
    integers beyond 64 bits (floats to it): a text with 19 digits in a row, which any such
    number has, is read by the standard library."""
    set_json_loads(_loads, conn)


_LONG_NUMBER = re.compile(rb"[0-9]{19}")


def _loads(data: bytes | bytearray | memoryview | str) -> Any:
    raw = data.encode() if isinstance(data, str) else data
    if _LONG_NUMBER.search(raw):
        return json.loads(bytes(raw))
    return orjson.loads(raw)


def read_pinned(pool: ConnectionPool[Any], conn: Connection[Any], read: Callable[[], R]) -> R:
    """`read()` with `conn` (of `pool`) pinned for its reads."""
    with _pinned(pool, conn):
        return read()
