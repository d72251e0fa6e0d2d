"""C7 with the real trainer (`python -m trainer` as the sandbox Pod's process): a run on a gated
Hub model gets the organization's Hugging Face token through the control plane with its run
token — never in the Pod's environment or the manifest — downloads the model from the Hub (the
sandbox's, where a tiny model is published under the gated Llama name) into the network
volume's cache, and a second run of the same model downloads nothing."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from entrypoints.server import serve_with_sandbox
from entrypoints.settings import Settings
from runpod_sandbox import Sandbox
from tests.e2e.conftest import Api, Org, assert_no_key_material, connect, problem, volume_spec
from tests.e2e.flows import A100, project_with_dataset, run_config

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
QWEN_05B = "Qwen/Qwen2.5-0.5B-Instruct"
VOLUME = "nv7eu1ro4k"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """Real trainer Pods that may reach the sandbox's Hub (the suite keeps HF_HUB_OFFLINE=1
    for the trainer's own tests)."""
    env = {"HF_HUB_OFFLINE": "0", "TENSORANT_PROGRESS_SECONDS": "0.2"}
    with Sandbox(startup_seconds=0.1, trainer="real", trainer_env=env) as box:
        settings = Settings(data_dir=tmp_path_factory.mktemp("hub-pod"))
        server, container = serve_with_sandbox(settings, box, reconcile_interval=0.5)
        api = Api("hub-pod", server.base_url, container, box, settings)
        try:
            yield api
        finally:
            api.close()
            server.stop()


def _until(check: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _launch(org: Org, config: dict[str, Any]) -> str:
    r = org.member.post("/v1/runs", json=config)
    assert r.status_code == 201, r.text
    run_id = str(r.json()["id"])
    body = {"confirm": True, "accepted_price_per_hour": "1.64"}
    r = org.member.post(f"/v1/runs/{run_id}/launch", json=body)
    assert r.status_code == 202, r.text
    return run_id


def _trained(org: Org, run_id: str) -> None:
    """Wait for the trainer to have loaded the model and trained (its log says so); cancel it
    if it still runs."""

    def log() -> str:
        return str(org.member.get(f"/v1/runs/{run_id}/logs").text)

    def trained() -> bool:
        events = org.auditor.get(f"/v1/runs/{run_id}/events", params={"limit": 500}).json()
        failed = [e for e in events["events"] if e["type"] in ("BootFailed", "ExportFailed")]
        assert not failed, (failed, log()[-3000:])
        return f"base model {LLAMA_8B}" in log() and "training " in log()

    _until(trained, 300, f"run {run_id} to train")
    org.member.post(f"/v1/runs/{run_id}/cancel")  # 409 once it ended by itself


def test_c7_a_gated_run_fetches_the_token_by_run_token_and_the_volume_caches_the_model(
    stack: Api, tiny_model: Path, tmp_path: Path
) -> None:
    box, creds = stack.sandbox, stack.sandbox.credentials()
    commit = box.hub.publish(LLAMA_8B, tiny_model)
    org = stack.new_org()
    connect(org, creds)
    assert org.owner.put("/v1/storage", json=volume_spec(creds)).status_code == 200
    project, dataset = project_with_dataset(org)
    config = run_config(project, dataset, base_model=LLAMA_8B, gpu_type_id=A100)
    r = org.owner.put("/v1/connections/huggingface", json={"token": creds["hf_token"]})
    assert r.status_code == 200, r.text

    first = _launch(org, config)
    pod_id = _until(lambda: org.member.get(f"/v1/runs/{first}").json()["pod_id"], 60, "a Pod")
    _trained(org, first)
    downloaded = [f for repo, f in box.hub.downloads if repo == LLAMA_8B]
    assert "config.json" in downloaded and "model.safetensors" in downloaded, downloaded

    # The token reached the trainer only through the control plane: not in the Pod's
    # environment (any key that can read the RunPod account reads it), not in the manifest.
    env = dict(box.model.pods[pod_id].env)
    assert creds["hf_token"] not in json.dumps(env)
    assert not {"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} & set(env)
    manifest = json.loads(box.read_volume_file(VOLUME, f"runs/{first}/manifest.json") or b"")
    assert manifest["base_model"] == {
        "source": "hub",
        "id": LLAMA_8B,
        "hub_endpoint": creds["hub_url"],
        "gated": True,
        "revision": commit,  # R19: main's commit at launch, pinned: the trainer reads that one
    }
    assert creds["hf_token"].encode() not in (
        box.read_volume_file(VOLUME, f"runs/{first}/manifest.json") or b""
    )
    # The route answers only the run's own token, and only for a gated model's run.
    run_token = env["TENSORANT_RUN_TOKEN"]
    url = f"{stack.base_url}/v1/trainer/runs/{first}/hub-token"
    member = httpx.get(url, headers={"Authorization": f"Bearer {org.tokens['member']}"})
    problem(member, 404, "not-found")

    # The weights are in the volume's Hub cache: a second run downloads nothing.
    cache = box.volume_path(VOLUME) / ".cache" / "huggingface"
    assert list(cache.glob("models--meta-llama--Llama-3.1-8B-Instruct/snapshots/*/*.safetensors"))
    before = len(box.hub.downloads)
    second = _launch(org, config)
    _trained(org, second)
    assert box.hub.downloads[before:] == []

    # A run on an open model is given no token, even with its own run token.
    open_run = _launch(org, {**config, "base_model": QWEN_05B})
    open_pod = _until(lambda: org.member.get(f"/v1/runs/{open_run}").json()["pod_id"], 60, "Pod")
    open_token = box.model.pods[open_pod].env["TENSORANT_RUN_TOKEN"]
    refused = httpx.get(
        f"{stack.base_url}/v1/trainer/runs/{open_run}/hub-token",
        headers={"Authorization": f"Bearer {open_token}"},
    )
    problem(refused, 404, "not-found")
    assert run_token != open_token
    org.member.post(f"/v1/runs/{open_run}/cancel")
    # Nothing this test was answered or logged holds a token, nor the trainers' logs.
    assert_no_key_material(creds)
    for run_id in (first, second):
        assert creds["hf_token"] not in org.member.get(f"/v1/runs/{run_id}/logs").text
