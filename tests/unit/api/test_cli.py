"""The CLI: admin commands print ids and tokens once; sandbox credentials need no server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from adapters.bootstrap import build
from adapters.settings import Settings
from api.cli import cli
from application.service import hash_token
from projections.views import GLOBAL, MEMBERS

runner = CliRunner()


def test_sandbox_credentials_print_the_seeded_account_without_a_server() -> None:
    result = runner.invoke(cli, ["sandbox", "credentials", "--port", "8282"])
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["api_base_url"] == "http://127.0.0.1:8282"
    assert {
        "api_key",
        "read_only_api_key",
        "s3_endpoint_url",
        "s3_access_key_id",
        "s3_secret_access_key",
        "volumes",
    } <= set(body)


def test_admin_creates_an_org_and_a_member_whose_token_resolves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENSORANT_DATA_DIR", str(tmp_path))
    created = runner.invoke(cli, ["admin", "create-org", "Acme", "--mode", "provided"])
    assert created.exit_code == 0, created.output
    org_id = created.output.strip()
    added = runner.invoke(cli, ["admin", "add-member", org_id, "a@example.com", "--role", "owner"])
    assert added.exit_code == 0, added.output
    token = added.output.strip()
    assert token.startswith("tnt_")
    container = build(Settings(data_dir=tmp_path))
    try:
        member = container.views.get(MEMBERS, GLOBAL, hash_token(token))
        assert member is not None
        assert member["organization_id"] == org_id
        assert member["role"] == "owner"
    finally:
        container.close()
    assert token.encode() not in (tmp_path / "events.db").read_bytes()
    assert token.encode() not in (tmp_path / "views.db").read_bytes()
