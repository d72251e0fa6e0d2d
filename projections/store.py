"""The view store: one interface, SQLite and PostgreSQL implementations, and a URL factory."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from projections.postgres_view import PostgresViewBatch, PostgresViewStore
from projections.sqlite_view import SQLiteViewBatch, SQLiteViewStore
from projections.view import (
    ConcurrentApplyError,
    Doc,
    DocKey,
    ViewBatch,
    ViewBusyError,
    ViewStore,
    canonical,
    dumps,
)

__all__ = [
    "ConcurrentApplyError",
    "Doc",
    "DocKey",
    "PostgresViewBatch",
    "PostgresViewStore",
    "SQLiteViewBatch",
    "SQLiteViewStore",
    "ViewBatch",
    "ViewBusyError",
    "ViewStore",
    "canonical",
    "dumps",
    "open_view_store",
    "parse_postgres_url",
]

# Query parameters of a postgresql:// view-store URL that are ours, not libpq's.
_OWN_PARAMS = ("schema", "table_prefix")


def open_view_store(url: str) -> ViewStore:
    """Open `sqlite:///relative.db`, `sqlite:////abs/views.db` or `postgresql://...`.

    A PostgreSQL URL may carry `?schema=...&table_prefix=...`; they are removed before the URL
    reaches libpq.
    """
    if url.startswith("sqlite:///"):
        path = url.removeprefix("sqlite:///")
        if not path:
            msg = f"no database path in {url!r}"
            raise ValueError(msg)
        return SQLiteViewStore(path)
    if urlsplit(url).scheme in ("postgresql", "postgres"):
        conninfo, schema, table_prefix = parse_postgres_url(url)
        return PostgresViewStore(conninfo, schema=schema, table_prefix=table_prefix)
    msg = f"unsupported view store URL {url!r} (use sqlite:/// or postgresql://)"
    raise ValueError(msg)


def parse_postgres_url(url: str) -> tuple[str, str, str]:
    """(libpq URL without our parameters, schema, table prefix)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in _OWN_PARAMS}
    rest = [(k, v) for k, v in query if k not in _OWN_PARAMS]
    conninfo = urlunsplit(parts._replace(query=urlencode(rest)))
    return conninfo, own.get("schema") or "public", own.get("table_prefix", "")
