"""`tensorant admin` manages members for the operator: list, remove, set-role, rotate-token."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from application.organizations import hash_token
from entrypoints.bootstrap import build
from entrypoints.cli import cli
from entrypoints.settings import Settings
from projections.store.base import INDEX
from projections.views.identity import MEMBERS

runner = CliRunner()


def _resolves(data_dir: Path, token: str) -> bool:
    container = build(Settings(data_dir=data_dir))
    try:
        return container.views.get(MEMBERS, INDEX, hash_token(token)) is not None
    finally:
        container.close()


def test_the_operator_lists_removes_demotes_and_rotates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENSORANT_DATA_DIR", str(tmp_path))
    org_id = runner.invoke(cli, ["admin", "create-org", "Acme"]).output.strip()
    owner = runner.invoke(cli, ["admin", "add-member", org_id, "o@example.com", "--role", "owner"])
    added = runner.invoke(
        cli,
        [
            "admin",
            "add-member",
            org_id,
            "m@example.com",
            "--role",
            "member",
            "--expires-in-days",
            "7",
        ],
    )
    assert owner.exit_code == 0 and added.exit_code == 0, added.output
    listed = runner.invoke(cli, ["admin", "list-members", org_id])
    assert listed.exit_code == 0, listed.output
    members = {m["email"]: m for m in json.loads(listed.output)}
    assert set(members) == {"o@example.com", "m@example.com"}
    assert members["m@example.com"]["token_expires_at"] and "tnt_" not in listed.output
    member_id = members["m@example.com"]["user_id"]
    owner_id = members["o@example.com"]["user_id"]

    rotated = runner.invoke(cli, ["admin", "rotate-token", org_id, member_id])
    assert rotated.exit_code == 0, rotated.output
    new = rotated.output.strip()
    assert new.startswith("tnt_") and new != added.output.strip()
    assert _resolves(tmp_path, new) and not _resolves(tmp_path, added.output.strip())

    demoted = runner.invoke(cli, ["admin", "set-role", org_id, member_id, "--role", "auditor"])
    assert demoted.exit_code == 0, demoted.output
    roles = {
        m["email"]: m["role"]
        for m in json.loads(runner.invoke(cli, ["admin", "list-members", org_id]).output)
    }
    assert roles == {"o@example.com": "owner", "m@example.com": "auditor"}

    last = runner.invoke(cli, ["admin", "remove-member", org_id, owner_id])
    assert last.exit_code == 1 and "last-owner" in last.output

    removed = runner.invoke(cli, ["admin", "remove-member", org_id, member_id])
    assert removed.exit_code == 0, removed.output
    assert not _resolves(tmp_path, new)
    gone = runner.invoke(cli, ["admin", "remove-member", org_id, member_id])
    assert gone.exit_code == 1 and "not-found" in gone.output
