"""W3 and R19 the way a user meets them: `tensorant datasets …` and `tensorant runs …` against a
served `tensorant serve --sandbox`, over HTTP only, through the Python client; the adapter
downloaded is the one whose sha256 the run shows (streamed for a network volume, a presigned GET
for custom S3)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runpod_sandbox.seed import seeded_credentials
from tests.e2e.conftest import custom_spec, volume_spec
from tests.e2e.flows import A100, CHATS, QWEN_7B, run_config
from tests.e2e.served import Served, _exe, serve


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("clients")) as srv:
        srv.wait_healthy(120)
        yield srv


def _owner(srv: Served, name: str, spec_of: Any) -> tuple[str, dict[str, Any]]:
    """A new organization's owner token, with RunPod and storage connected over HTTP."""
    org_id = srv.cli("admin", "create-org", name).strip().splitlines()[-1].strip()
    out = srv.cli("admin", "add-member", org_id, f"owner@{name.lower()}.example", "--role", "owner")
    token = re.findall(r"tnt_\S+", out)[-1]
    creds = seeded_credentials(srv.sandbox_port)
    with httpx.Client(base_url=srv.base_url, headers={"Authorization": f"Bearer {token}"}) as h:
        assert h.post("/v1/connections/runpod", json={"api_key": creds["api_key"]}).is_success
        assert h.put("/v1/storage", json=spec_of(creds)).is_success
        project = h.post("/v1/projects", json={"name": "support-bot"}).json()
        gpus = h.get("/v1/gpus", params={"datacenter_id": "EU-RO-1"}).json()
    price = next(g["price_per_hour"] for g in gpus if g["id"] == A100)
    return token, {"project_id": project["id"], "price": price}


def _tensorant(srv: Served, token: str, *args: str, input: str | None = None) -> Any:
    """`tensorant ARGS` with the server and token from the environment, as a user sets them."""
    env = {**srv.env, "TENSORANT_URL": srv.base_url, "TENSORANT_TOKEN": token, "COLUMNS": "200"}
    return subprocess.run(
        [_exe(), *args],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        input=input,
    )


def _ok(done: Any) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    return str(done.stdout)


@pytest.mark.parametrize("kind", ["runpod_volume", "s3"])
def test_w3_a_trial_through_the_cli_from_upload_to_the_downloaded_adapter(
    served: Served, tmp_path: Path, kind: str
) -> None:
    spec_of = volume_spec if kind == "runpod_volume" else custom_spec
    token, org = _owner(served, f"Cli{kind.title().replace('_', '')}", spec_of)
    data = tmp_path / "chats.jsonl"
    data.write_bytes(CHATS)

    uploaded = json.loads(
        _ok(_tensorant(served, token, "datasets", "upload", org["project_id"], str(data),
                       "--name", "chats", "--version", "1", "--json"))
    )  # fmt: skip
    assert uploaded["row_count"] == CHATS.count(b"\n") and uploaded["name"] == "chats"
    listed = json.loads(
        _ok(_tensorant(served, token, "datasets", "list", org["project_id"], "--json"))
    )
    assert [d["id"] for d in listed] == [uploaded["id"]]

    run = json.loads(
        _ok(_tensorant(served, token, "runs", "create", "--project", org["project_id"],
                       "--dataset", uploaded["id"], "--base-model", QWEN_7B, "--gpu", A100,
                       "--price-limit", "2.00", "--json"))
    )  # fmt: skip
    assert run["state"] == "draft"
    # Before training there is nothing to download: the server's words, exit code 1
    early = _tensorant(served, token, "runs", "download", run["id"], "-o", str(tmp_path / "x"))
    assert early.returncode == 1 and "adapter-not-ready" in early.stderr, early.stderr
    assert not (tmp_path / "x").exists()

    # `watch` follows the run from its draft; launch asks which price is accepted
    env = {**served.env, "TENSORANT_URL": served.base_url, "TENSORANT_TOKEN": token}
    args = ["runs", "watch", run["id"], "--interval", "0.2", "--timeout", "150"]
    with subprocess.Popen([_exe(), *args], env=env, stdout=subprocess.PIPE, text=True) as watch:
        assert watch.stdout is not None
        assert "draft" in watch.stdout.readline()  # watching before anything is rented
        price = f"{org['price']}\n"
        launched = _ok(_tensorant(served, token, "runs", "launch", run["id"], input=price))
        assert "launching" in launched, launched
        watched, _ = watch.communicate(timeout=170)
        assert watch.returncode == 0, watched
    lines = watched.strip().splitlines()
    states = [line.split()[1] for line in lines if line[:2].isdigit()]
    assert states[-1] == "succeeded", watched
    assert "running" in states or "exporting" in states or "verifying" in states, watched
    assert any(re.search(r"step \d+/\d+", line) for line in lines), watched  # progress shown

    shown = httpx.get(
        f"{served.base_url}/v1/runs/{run['id']}", headers={"Authorization": f"Bearer {token}"}
    ).json()
    target = tmp_path / "adapter.zip"
    said = _ok(_tensorant(served, token, "runs", "download", run["id"], "-o", str(target)))
    assert hashlib.sha256(target.read_bytes()).hexdigest() == shown["adapter"]["sha256"]
    assert target.stat().st_size == shown["adapter"]["size_bytes"]
    assert shown["adapter"]["sha256"] in said

    logs = _ok(_tensorant(served, token, "runs", "logs", run["id"]))
    assert logs.strip(), "the run's training log is printed"


def test_w3_cancel_asks_first_and_a_no_cancels_nothing(served: Served) -> None:
    token, org = _owner(served, "CliCancel", volume_spec)
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=served.base_url, headers=headers) as h:
        dv = h.post(
            f"/v1/projects/{org['project_id']}/datasets",
            data={"name": "c", "version": "1"},
            files={"file": ("c.jsonl", CHATS, "application/jsonl")},
        ).json()
        body = run_config(org["project_id"], dv["id"])
        run = h.post("/v1/runs", json=body).json()
        declined = _tensorant(served, token, "runs", "cancel", run["id"], input="n\n")
        assert declined.returncode == 1 and "Aborted" in declined.stdout + declined.stderr
        assert h.get(f"/v1/runs/{run['id']}").json()["state"] == "draft"
        _ok(_tensorant(served, token, "runs", "cancel", run["id"], "--yes"))
        assert h.get(f"/v1/runs/{run['id']}").json()["state"] != "draft"


def test_w3_without_a_server_the_cli_says_what_to_set(served: Served, tmp_path: Path) -> None:
    env = {k: v for k, v in served.env.items() if k not in ("TENSORANT_URL", "TENSORANT_TOKEN")}
    env["TENSORANT_CLIENT_CONFIG"] = str(tmp_path / "none.toml")
    done = subprocess.run(
        [_exe(), "runs", "watch", "x"], check=False, env=env, capture_output=True, text=True
    )
    assert done.returncode == 2 and "TENSORANT_URL" in done.stderr, done.stderr
