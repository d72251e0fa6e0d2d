"""C7 over HTTP against a served sandbox stack: the Hugging Face token connection is checked
against the sandbox's Hub (the real huggingface_hub client), owner-only, shown by fingerprint,
rotated with both fingerprints recorded, and what a draft on a gated model is checked with; the
token appears nowhere but the vault (responses and log lines are searched after every e2e test
by tests/e2e/conftest.py; the stored bytes here)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.e2e.conftest import Api, Org, connect, key_material, problem, volume_spec
from tests.e2e.flows import draft, launch, project_with_dataset, run_config, wait_state
from tests.e2e.test_zz_secrets import _stored_rows_postgres, _stored_rows_sqlite

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
MISTRAL = "mistralai/Mistral-7B-Instruct-v0.3"
HUB = "/v1/connections/huggingface"


def _ready(api: Api, creds: dict[str, Any]) -> tuple[Org, dict[str, Any]]:
    org = api.new_org()
    connect(org, creds)
    assert org.owner.put("/v1/storage", json=volume_spec(creds)).status_code == 200
    project, dataset = project_with_dataset(org)
    return org, run_config(project, dataset, base_model=LLAMA_8B)


def _hub_events(org: Org) -> list[dict[str, Any]]:
    body = org.auditor.get("/v1/audit/events", params={"limit": 1000}).json()
    return [e for e in body["events"] if e["type"].startswith("HubToken")]


def test_c7_a_hub_token_decides_drafts_on_gated_models_and_stays_in_the_vault(
    api: Api, creds: dict[str, Any]
) -> None:
    org, llama = _ready(api, creds)
    full, restricted = creds["hf_token"], creds["hf_token_restricted"]

    # No token: a gated model is refused, with what to do.
    body = problem(org.member.post("/v1/runs", json=llama), 422, "base-model-gated")
    assert "PUT /v1/connections/huggingface" in body["detail"]
    assert org.member.get("/v1/connections").json()["huggingface"]["status"] == "not_connected"

    # Owner-only: a member, an auditor and finance are refused, and nothing is connected.
    for role in ("member", "auditor", "finance"):
        client = org.clients[role]
        problem(client.put(HUB, json={"token": full}), 403, "forbidden")
        problem(client.delete(HUB), 403, "forbidden")
    # A token the Hub refuses is not stored; a RunPod key in this field is refused unasked.
    problem(org.owner.put(HUB, json={"token": "hf_" + "Q" * 34}), 422, "invalid-hub-token")
    problem(org.owner.put(HUB, json={"token": creds["api_key"]}), 422, "wrong-kind-of-key")
    too_long = "hf_" + "L" * 600
    r = org.owner.put(HUB, json={"token": too_long})
    assert r.status_code == 422 and "L" * 600 not in r.text  # a refusal never echoes a token
    assert org.owner.get("/v1/connections").json()["huggingface"]["status"] == "not_connected"

    # A token of an account that never accepted Llama's licence: refused with what to do.
    r = org.owner.put(HUB, json={"token": restricted})
    assert r.status_code == 200, r.text
    card = r.json()
    assert card["status"] == "connected" and card["username"] == "sandbox-newcomer"
    assert card["token_fingerprint"] == "…" + restricted[-4:]
    body = problem(org.member.post("/v1/runs", json=llama), 422, "base-model-access-denied")
    assert "accept the licence" in body["detail"] and body["repository"] == LLAMA_8B
    assert body["licence_page"] == f"{creds['hub_url']}/{LLAMA_8B}"
    # ...while a gated model it was granted drafts.
    assert org.member.post("/v1/runs", json={**llama, "base_model": MISTRAL}).status_code == 201

    # Rotated to the full-access token: the Llama draft is accepted.
    r = org.owner.put(HUB, json={"token": full})
    assert r.status_code == 200, r.text
    card = r.json()
    assert (card["username"], card["token_fingerprint"]) == ("sandbox-trainer", "…" + full[-4:])
    assert card["rotated_at"] is not None
    r = org.member.post("/v1/runs", json=llama)
    assert r.status_code == 201, r.text
    assert r.json()["base_model"] == LLAMA_8B
    assert org.member.get("/v1/connections").json()["huggingface"] == card

    # The history names fingerprints, never tokens: the failed check, the save, the rotation.
    events = _hub_events(org)
    assert [e["type"] for e in events] == [
        "HubTokenCheckFailed",
        "HubTokenSaved",
        "HubTokenRotated",
    ]
    rotated = events[-1]["data"]
    assert (rotated["old_fingerprint"], rotated["new_fingerprint"]) == (
        "…" + restricted[-4:],
        "…" + full[-4:],
    )

    # Disconnected: the token leaves the vault and gated drafts are refused again.
    assert org.owner.delete(HUB).status_code == 204
    problem(org.member.post("/v1/runs", json=llama), 422, "base-model-gated")
    assert _hub_events(org)[-1]["type"] == "HubTokenRemoved"

    # Put it back, then look at every stored byte: only the vault's ciphertext holds it.
    assert org.owner.put(HUB, json={"token": full}).status_code == 200
    stored = (
        _stored_rows_sqlite(api.settings.data_dir)
        if api.postgres is None
        else _stored_rows_postgres(*api.postgres)
    )
    assert stored
    secrets = {k: v for k, v in key_material(creds).items() if k.startswith("hf_")}
    assert set(secrets) == {"hf_token", "hf_token_restricted"}
    for table, content in stored.items():
        for name, secret in secrets.items():
            assert secret.encode() not in content, f"{name} stored in plain text in {table}"
    assert api.container.services.hub.token(org.id) == full  # the vault holds it


def _hub_repo(api: Api, model_id: str) -> Path:
    """The model's folder in the volume's Hub cache (huggingface_hub's layout), emptied: the
    sandbox's volume outlives one stack."""
    repo = api.sandbox.volume_path("nv7eu1ro4k") / ".cache" / "huggingface"
    repo /= "models--" + model_id.replace("/", "--")
    shutil.rmtree(repo, ignore_errors=True)
    return repo


def _hub_snapshot(repo: Path, revision: str) -> str:
    """What a training Pod's download leaves there: refs/main naming the revision, and its
    snapshot with a config and weights. Its path on a serverless worker."""
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text('{"model_type": "llama"}')
    (snapshot / "model.safetensors").write_bytes(b"weights")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    return f"/runpod-volume/.cache/huggingface/{repo.name}/snapshots/{revision}"


def test_v2_a_gated_base_deploys_only_with_a_usable_token_and_never_hands_it_to_runpod(
    api: Api, creds: dict[str, Any]
) -> None:
    """Deploying an adapter of a gated base asks the Hub with the organization's token, as a
    draft does, and serves the base from the snapshot a training Pod left on the volume: the
    endpoint RunPod is given names that path and runs offline, with no token in its env."""
    org, llama = _ready(api, creds)
    full, restricted = creds["hf_token"], creds["hf_token_restricted"]
    assert org.owner.put(HUB, json={"token": full}).status_code == 200
    run_id = str(draft(org, llama)["id"])
    launch(org, run_id)
    wait_state(org, run_id, "succeeded", timeout=90)
    serverless = api.sandbox.model.serverless
    endpoints = len(serverless.endpoints)
    repo = _hub_repo(api, LLAMA_8B)

    def deploy() -> Any:
        return org.member.post("/v1/deployments", json={"run_id": run_id})

    # No token connected any more: refused with what to do.
    assert org.owner.delete(HUB).status_code == 204
    body = problem(deploy(), 422, "base-model-gated")
    assert "PUT /v1/connections/huggingface" in body["detail"]
    # A token whose account was never granted Llama: refused, naming the licence page.
    assert org.owner.put(HUB, json={"token": restricted}).status_code == 200
    body = problem(deploy(), 422, "base-model-access-denied")
    assert body["repository"] == LLAMA_8B and "deploy again" in body["detail"]
    # A usable token, but no copy of the base in the volume's Hub cache to serve from.
    assert org.owner.put(HUB, json={"token": full}).status_code == 200
    body = problem(deploy(), 409, "base-model-not-on-volume")
    assert "refs/main" in body["detail"]
    assert len(serverless.endpoints) == endpoints  # nothing was created at RunPod
    assert org.member.get("/v1/deployments").json() == []

    served = _hub_snapshot(repo, "0123456789abcdef0123456789abcdef01234567")
    r = deploy()
    assert r.status_code == 202, r.text
    dep = r.json()
    assert dep["state"] == "ready" and dep["served_model"] == served, dep
    created = serverless.endpoints[dep["endpoint_id"]].body  # what RunPod was given
    assert created["env"]["MODEL_NAME"] == served
    assert created["env"]["HF_HUB_OFFLINE"] == "1"
    assert not any("TOKEN" in name for name in created["env"])
    for token in (full, restricted):
        assert token not in json.dumps(created)
    adapter = api.sandbox.read_volume_file(
        "nv7eu1ro4k", f"serving/loras/{dep['adapter_name']}/adapter_config.json"
    )
    assert adapter is not None
    assert json.loads(adapter)["base_model_name_or_path"] == served

    gone = org.member.delete(f"/v1/deployments/{dep['id']}")
    assert gone.status_code == 202 and gone.json()["state"] == "deleted", gone.text
