"""Fixtures: the PostgreSQL server (skip when absent, fail under CI=true) and a world per store.

`postgres_url` is meant to move to tests/conftest.py as the shared PostgreSQL fixture.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict
from psycopg.sql import SQL, Identifier

from projections.store.base import ViewStore
from projections.store.postgres import PostgresViewStore
from projections.store.sqlite import SQLiteViewStore
from tests.unit.projections.toy import ToyApp


@pytest.fixture
def postgres_schema(postgres_url: str) -> Iterator[str]:
    """A fresh schema, dropped afterwards (other test suites share the database)."""
    schema = f"tproj_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(SQL("CREATE SCHEMA {}").format(Identifier(schema)))
    yield schema
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(schema)))


def postgres_app_env(url: str, schema: str) -> dict[str, str]:
    """eventsourcing's POSTGRES_* settings for a URL and schema."""
    params = conninfo_to_dict(url)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": str(params.get("dbname", "test")),
        "POSTGRES_HOST": str(params.get("host", "127.0.0.1")),
        "POSTGRES_PORT": str(params.get("port", "5432")),
        "POSTGRES_USER": str(params.get("user", "postgres")),
        "POSTGRES_PASSWORD": str(params.get("password", "")),
        "POSTGRES_SCHEMA": schema,
        "POSTGRES_POOL_SIZE": "4",
        "POSTGRES_MAX_OVERFLOW": "4",
    }


@dataclass
class World:
    """An event store and a view store on one backend; `new_*` make independent instances."""

    kind: str
    new_app: Callable[[], ToyApp]
    new_store: Callable[[], ViewStore]
    app: ToyApp
    store: ViewStore


# The documents' table as earlier deployments made it (a `jsonb` column; the store
# makes `json` now): the store must keep working on such a table without altering it.
JSONB_TABLE = (
    'CREATE TABLE {} (view text COLLATE "C" NOT NULL, org_id text COLLATE "C" NOT NULL,'
    ' key text COLLATE "C" NOT NULL, doc jsonb NOT NULL, PRIMARY KEY (view, org_id, key))'
)


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
        pytest.param("postgres-jsonb", marks=pytest.mark.postgres),
    ],
)
def world(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[World]:
    """The same test body on SQLite, on PostgreSQL, and on PostgreSQL with the documents'
    table an earlier version made (`JSONB_TABLE`)."""
    opened: list[Any] = []
    if request.param == "sqlite":
        env = {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": str(tmp_path / "e.db"),
        }

        def new_store() -> ViewStore:
            return SQLiteViewStore(str(tmp_path / "views.db"))

    else:
        url = request.getfixturevalue("postgres_url")
        schema = request.getfixturevalue("postgres_schema")
        env = postgres_app_env(url, schema)
        if request.param == "postgres-jsonb":
            with psycopg.connect(url, autocommit=True) as conn:
                table = SQL("{}.{}").format(Identifier(schema), Identifier("view_docs"))
                conn.execute(SQL(JSONB_TABLE).format(table))  # type: ignore[arg-type]

        def new_store() -> ViewStore:
            return PostgresViewStore(url, schema=schema, max_size=4)

    def new_app() -> ToyApp:
        app = ToyApp(env=env)
        opened.append(app)
        return app

    def tracked_store() -> ViewStore:
        store = new_store()
        opened.append(store)
        return store

    yield World(request.param, new_app, tracked_store, new_app(), tracked_store())
    for resource in reversed(opened):
        resource.close()
