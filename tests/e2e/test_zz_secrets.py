"""C6, checked after the rest of the e2e suite ran on this store: key material appears in no
response body, no log line, and no stored table except as the vault's ciphertext.

(The file name sorts last so that it runs after the other e2e tests of each store kind.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from psycopg.sql import SQL, Identifier

from tests.e2e.conftest import LOG, RESPONSES, Api, connect, custom_spec, volume_spec


def _secrets(creds: dict[str, Any]) -> dict[str, str]:
    return {
        "api_key": creds["api_key"],
        "read_only_api_key": creds["read_only_api_key"],
        "s3_secret_access_key": creds["s3_secret_access_key"],
        "custom_secret_access_key": creds["custom_s3"]["secret_access_key"],
        "custom_access_key_id": creds["custom_s3"]["access_key_id"],
    }


def _exercise(api: Api, creds: dict[str, Any]) -> None:
    """Make sure every secret went through the API at least once on this store."""
    o = api.new_org()
    connect(o, creds)
    o.owner.post("/v1/connections/runpod/rotate", json={"api_key": creds["read_only_api_key"]})
    o.owner.put("/v1/storage", json=volume_spec(creds))
    o2 = api.new_org()
    o2.owner.put("/v1/storage", json=custom_spec(creds))
    o2.owner.put("/v1/storage", json=custom_spec(creds, bucket="no-such-bucket"))


def _stored_rows_sqlite(data_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in data_dir.iterdir() if p.is_file()}


def _stored_rows_postgres(url: str, schema: str) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    with psycopg.connect(url) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s",
                (schema,),
            )
        ]
        for t in tables:
            chunks: list[bytes] = []
            for row in conn.execute(
                SQL("SELECT * FROM {}.{}").format(Identifier(schema), Identifier(t))
            ):
                for v in row:
                    chunks.append(
                        bytes(v) if isinstance(v, bytes | memoryview) else str(v).encode()
                    )
            out[t] = b"\n".join(chunks)
    return out


def test_key_material_appears_in_no_response_log_or_table_C6(
    api: Api, creds: dict[str, Any]
) -> None:
    _exercise(api, creds)
    secrets = _secrets(creds)
    assert RESPONSES, "the suite recorded no responses"
    for name, secret in secrets.items():
        needle = secret.encode()
        leaked = [body[:200] for body in RESPONSES if needle in body]
        assert not leaked, f"{name} in a response body: {leaked[0]!r}"
        lines = [line for line in LOG.lines if secret in line]
        assert not lines, f"{name} in a log line: {lines[0][:300]}"
    if api.postgres is None:
        stored = _stored_rows_sqlite(api.settings.data_dir)
    else:
        stored = _stored_rows_postgres(*api.postgres)
    assert stored
    for table, content in stored.items():
        for name, secret in secrets.items():
            assert secret.encode() not in content, f"{name} stored in plain text in {table}"
    vault = [t for t in stored if "vault" in t]
    assert vault, f"no vault table among {sorted(stored)}"
