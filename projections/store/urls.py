"""From a database URL to a store: the one reading of our PostgreSQL URLs, and the view
store a `sqlite:///` or `postgresql://` URL names."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from projections.store.base import ViewStore
from projections.store.postgres import PostgresViewStore
from projections.store.sqlite import SQLiteViewStore

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
    if is_postgres_url(url):
        pg = parse_postgres_url(url)
        return PostgresViewStore(pg.conninfo, schema=pg.schema, table_prefix=pg.table_prefix)
    msg = f"unsupported view store URL {url!r} (use sqlite:/// or postgresql://)"
    raise ValueError(msg)


def is_postgres_url(url: str) -> bool:
    return urlsplit(url).scheme in ("postgresql", "postgres")


@dataclass(frozen=True)
class PostgresUrl:
    """A `postgresql://` URL of ours, read once: libpq's part, and our own parameters."""

    conninfo: str  # the URL without our parameters, as libpq takes it
    schema: str
    table_prefix: str
    host: str
    port: int
    user: str
    password: str = field(repr=False)
    dbname: str

    def with_search_path(self) -> str:
        """The URL whose sessions find tables in `schema` first (the vault's, beside the log)."""
        parts = urlsplit(self.conninfo)
        query = [*parse_qsl(parts.query), ("options", f"-csearch_path={self.schema}")]
        return urlunsplit(parts._replace(query=urlencode(query)))


def parse_postgres_url(url: str) -> PostgresUrl:
    """The one reading of a PostgreSQL URL (event store, views, vault, logs, locks):
    `?schema=` and `?table_prefix=` are ours and never reach libpq."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in _OWN_PARAMS}
    rest = [(k, v) for k, v in query if k not in _OWN_PARAMS]
    return PostgresUrl(
        conninfo=urlunsplit(parts._replace(query=urlencode(rest))),
        schema=own.get("schema") or "public",
        table_prefix=own.get("table_prefix", ""),
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 5432,
        user=unquote(parts.username or "postgres"),
        password=unquote(parts.password or ""),
        dbname=unquote(parts.path.lstrip("/")) or "postgres",
    )
