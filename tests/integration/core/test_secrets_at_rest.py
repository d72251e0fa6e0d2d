"""C6: key material lives only in the vault's ciphertext — not in events, views, other tables
or logs — on the embedded SQLite store and on PostgreSQL; shredding the data key makes it
unreadable."""

from __future__ import annotations

import logging
import os
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from adapters.vault import SqlSecretVault
from application.errors import InvalidCredentials, SecretUnavailable
from application.services import Services, build_services
from tests.builders import volume
from tests.conftest import POSTGRES_URL
from tests.fakes import GOOD_KEY, S3_ACCESS, S3_SECRET, FakeCompute, FakeObjectStore, FixedClock

SECRETS = (GOOD_KEY, S3_SECRET, S3_ACCESS)
WRONG_KEY = "rpa_" + "Z" * 36 + "WRNG"


def sqlite_dump(path: Path) -> str:
    """Every value of every table, as text (blobs decoded leniently) — not just the file bytes."""
    out = []
    with sqlite3.connect(path) as db:
        for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'"):
            for row in db.execute(f'SELECT * FROM "{table}"'):
                for v in row:
                    out.append(v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v))
    return "\n".join(out) + path.read_bytes().decode("latin-1")


def postgres_dump(schema: str) -> str:
    out = []
    with psycopg.connect(POSTGRES_URL) as conn:
        tables = conn.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = %s", (schema,)
        ).fetchall()
        assert tables, "the store wrote no tables"
        for (table,) in tables:
            for row in conn.execute(f'SELECT * FROM "{schema}"."{table}"'):
                for v in row:
                    out.append(
                        bytes(v).decode("utf-8", "replace")
                        if isinstance(v, bytes | memoryview)
                        else str(v)
                    )
    return "\n".join(out)


def exercise(app: Services) -> str:
    org = app.organizations.create("Acme")
    with pytest.raises(InvalidCredentials):
        app.connections.connect(org, "owner", WRONG_KEY)
    app.connections.connect(org, "owner", GOOD_KEY)
    app.storage.bind_volume(org, "owner", volume())
    app.connections.rotate_key(org, "owner", GOOD_KEY)
    return org


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_c6_key_material_is_only_in_the_vault_ciphertext(
    store: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, request: pytest.FixtureRequest
) -> None:
    caplog.set_level(logging.DEBUG)
    master = os.urandom(32)
    if store == "sqlite":
        env: dict[str, Any] = {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": str(tmp_path / "events.db"),
        }
        vault = SqlSecretVault.sqlite(tmp_path / "vault.db", master)
    else:
        request.getfixturevalue("postgres_url")
        schema = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(POSTGRES_URL, autocommit=True) as c:
            c.execute(f'CREATE SCHEMA "{schema}"')
        request.addfinalizer(
            lambda: psycopg.connect(POSTGRES_URL, autocommit=True).execute(
                f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'
            )
        )
        from tests.conftest import postgres_env

        env = postgres_env(schema)
        vault = SqlSecretVault.postgres(f"{POSTGRES_URL}?options=-csearch_path%3D{schema}", master)
    app = build_services(
        env, compute=FakeCompute(), objects=FakeObjectStore(), vault=vault, clock=FixedClock()
    )
    org = exercise(app)

    assert vault.get(org, "runpod_api_key") == GOOD_KEY
    assert vault.get(org, "s3_secret_access_key") == S3_SECRET
    stored = (
        sqlite_dump(tmp_path / "events.db") + sqlite_dump(tmp_path / "vault.db")
        if store == "sqlite"
        else postgres_dump(env["POSTGRES_SCHEMA"])
    )
    assert "ConnectionSaved" in stored or "tensorant" in stored  # we did read the events
    for secret in (*SECRETS, WRONG_KEY):
        assert secret not in stored
        assert secret not in caplog.text
        assert secret[4:20] not in stored  # no partial key either (fingerprints are 4 chars)
    vault.shred(org)
    with pytest.raises(SecretUnavailable):
        vault.get(org, "runpod_api_key")
    app.close()
    vault.close()
