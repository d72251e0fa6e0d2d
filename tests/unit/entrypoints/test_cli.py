"""The CLI: admin commands print ids and tokens once; sandbox credentials need no server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from application.organizations import hash_token
from entrypoints.bootstrap import build, open_for_rebuild
from entrypoints.cli import cli
from entrypoints.settings import Settings
from projections.store.base import INDEX
from projections.views.audit import InvalidAnchor
from projections.views.identity import MEMBERS
from projections.views.registry import all_projections

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
        "hf_token",
        "hf_token_restricted",
    } <= set(body)
    # C7: the sandbox's Hugging Face Hub and its two seeded tokens (full access; no Llama)
    assert body["hub_url"] == "http://127.0.0.1:8282/hf"
    assert body["hf_token"].startswith("hf_") and body["hf_token_restricted"].startswith("hf_")
    assert body["hf_token"] != body["hf_token_restricted"]


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
        member = container.views.get(MEMBERS, INDEX, hash_token(token))
        assert member is not None
        assert member["organization_id"] == org_id
        assert member["role"] == "owner"
    finally:
        container.close()
    assert token.encode() not in (tmp_path / "events.db").read_bytes()
    assert token.encode() not in (tmp_path / "views.db").read_bytes()


def test_audit_verify_prints_heads_that_a_later_verify_checks_as_anchors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TENSORANT_DATA_DIR", str(tmp_path))
    org_id = runner.invoke(cli, ["admin", "create-org", "Acme"]).output.strip()
    runner.invoke(cli, ["admin", "add-member", org_id, "a@example.com", "--role", "auditor"])
    first = runner.invoke(cli, ["audit", "verify"])
    assert first.exit_code == 0, first.output
    report = json.loads(first.output)
    head = report["heads"][org_id]
    assert report["ok"] is True and head["count"] >= 2 and len(head["head"]) == 64

    kept = tmp_path / "anchor.json"  # in real use: somewhere the database's writers cannot reach
    kept.write_text(first.output)
    assert runner.invoke(cli, ["audit", "verify", "--anchor", str(kept)]).exit_code == 0
    report["heads"][org_id]["head"] = "f" * 64  # a history rewritten since the anchor was kept
    kept.write_text(json.dumps(report))
    forged = runner.invoke(cli, ["audit", "verify", "--anchor", str(kept)])
    assert forged.exit_code == 1
    assert json.loads(forged.output)["first_bad_position"] == head["position"]

    kept.write_text("not an earlier output")
    bad = runner.invoke(cli, ["audit", "verify", "--anchor", str(kept)])
    assert isinstance(bad.exception, InvalidAnchor)  # `tensorant` prints its title and detail


def test_projections_rebuild_shared_among_processes_gives_the_same_views(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tensorant projections rebuild --processes 2`: every view rebuilt, by two
    processes, to the very documents one process builds."""
    monkeypatch.setenv("TENSORANT_DATA_DIR", str(tmp_path))
    for name in ("Acme", "Globex"):
        org_id = runner.invoke(cli, ["admin", "create-org", name]).output.strip()
        runner.invoke(cli, ["admin", "add-member", org_id, f"a@{name}.test", "--role", "owner"])

    def digests(*, then_empty: bool = False) -> dict[str, str]:
        log, views = open_for_rebuild()
        try:
            found = {p.name: views.digest(p.name) for p in all_projections()}
            for p in all_projections() if then_empty else ():
                views.reset(p.name)
            return found
        finally:
            views.close()
            log.close()

    one = runner.invoke(cli, ["projections", "rebuild"])
    assert one.exit_code == 0, one.output
    before = digests(then_empty=True)
    assert digests() != before  # nothing left: the rebuild below builds every view
    shared = runner.invoke(cli, ["projections", "rebuild", "--processes", "2"])
    assert shared.exit_code == 0, shared.output
    printed = dict(line.split(": ") for line in shared.output.strip().splitlines())
    assert set(printed) == {p.name for p in all_projections()}
    assert printed["audit"] == one.output.split("audit: ")[1].splitlines()[0]
    assert int(printed["audit"].split()[0]) > 0
    assert digests() == before
