"""C6: key material appears in no response body, no log line, and no stored table except as the
vault's ciphertext. Every e2e test's responses and log lines are checked after it
(tests/e2e/conftest.py); this test sends every secret through the API itself and then also reads
every table of its store.

(The file name sorts last so that, in one test process, it runs after the other e2e tests.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from psycopg.sql import SQL, Identifier

from tests.e2e.conftest import (
    RESPONSES,
    Api,
    assert_no_key_material,
    connect,
    custom_spec,
    key_material,
    volume_spec,
)


def _exercise(api: Api, creds: dict[str, Any]) -> None:
    """Make sure every secret went through the API at least once on this store."""
    o = api.new_org()
    connect(o, creds)
    o.owner.post("/v1/connections/runpod/rotate", json={"api_key": creds["read_only_api_key"]})
    o.owner.put("/v1/storage", json=volume_spec(creds))
    o.owner.put("/v1/connections/huggingface", json={"token": creds["hf_token_restricted"]})
    o.owner.put("/v1/connections/huggingface", json={"token": creds["hf_token"]})
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
    responses = len(RESPONSES)
    _exercise(api, creds)
    assert len(RESPONSES) > responses, "the exercise recorded no responses"
    assert_no_key_material(creds)  # everything this test process recorded so far
    secrets = key_material(creds)
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
