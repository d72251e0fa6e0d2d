"""V4: the sandbox's REST v2 Serverless endpoints and their workers, which load the tiny base model
and LoRA adapters from the network volume with transformers + peft and answer the
OpenAI-compatible route greedily; scale to zero on the sandbox clock; charges in the ledger."""

from __future__ import annotations

import json
import shutil
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from runpod_sandbox import Sandbox, seed
from runpod_sandbox.serverless import POOL_PRICES

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

BASE = "/runpod-volume/models/tiny"
LORAS = "/runpod-volume/serving/loras"


def make_adapter(tiny: Path, out: Path, base_name: str, seed_: int, r: int = 8) -> Path:
    """A LoRA with non-zero weights for the tiny model (peft's own save format)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed_)
    base = AutoModelForCausalLM.from_pretrained(tiny, torch_dtype=torch.float32)
    config = LoraConfig(
        r=r, lora_alpha=64, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    model = get_peft_model(base, config)
    for name, param in model.named_parameters():
        if "lora_" in name:
            torch.nn.init.normal_(param, std=0.5)
    model.save_pretrained(str(out), safe_serialization=True, save_embedding_layers=False)
    path = out / "adapter_config.json"
    cfg = json.loads(path.read_text())
    cfg["base_model_name_or_path"] = base_name
    path.write_text(json.dumps(cfg))
    (out / "README.md").unlink(missing_ok=True)
    return out


@pytest.fixture
def served_volume(tiny_model: Path, tmp_path: Path) -> Any:
    with Sandbox(startup_seconds=0.1) as sb:
        volume = next(v for v in seed.SEED_VOLUMES if v.datacenter_id == "EU-RO-1")
        root = sb.volume_path(volume.id)
        shutil.copytree(tiny_model, root / "models" / "tiny")
        make_adapter(tiny_model, root / "serving" / "loras" / "colours", BASE, 1)
        yield sb, volume


def _body(volume_id: str, **changes: Any) -> dict[str, Any]:
    body = {
        "name": "tensorant-serve-test",
        "image": "runpod/worker-v1-vllm:v2.25.0",
        "gpu": {"pools": ["ADA_24", "AMPERE_24"], "count": 1},
        "workers": {"min": 0, "max": 2, "idleTimeout": 60},
        "networkVolumes": [volume_id],
        "dataCenterIds": ["EU-RO-1"],
        "env": {
            "MODEL_NAME": BASE,
            "ENABLE_LORA": "true",
            "MAX_LORA_RANK": "16",
            "VLLM_LORA_RESOLVER_CACHE_DIR": LORAS,
        },
    }
    body.update(changes)
    return body


def test_an_endpoint_serves_the_adapter_scales_to_zero_and_bills(served_volume: Any) -> None:
    sb, volume = served_volume
    api = httpx.Client(
        base_url=sb.base_url,
        headers={"Authorization": f"Bearer {sb.credentials()['api_key']}"},
        timeout=120,
    )
    bad = api.post("/v2/serverless", json={**_body(volume.id), "gpuTypeIds": ["x"]})
    assert bad.status_code == 422, bad.text
    created = api.post("/v2/serverless", json=_body(volume.id))
    assert created.status_code == 201, created.text
    ep = created.json()
    assert ep["workers"] == {"min": 0, "max": 2, "idleTimeout": 60}
    assert [e["id"] for e in api.get("/v2/serverless").json()] == [ep["id"]]
    assert api.get(f"/v2/serverless/{ep['id']}/workers").json()["workers"] == []

    chat = f"/v2/{ep['id']}/openai/v1/chat/completions"
    ask: dict[str, Any] = {"messages": [{"role": "user", "content": "What colour is the sky?"}]}
    ask |= {"temperature": 0, "max_tokens": 12}
    tuned = api.post(chat, json={**ask, "model": "colours"})
    assert tuned.status_code == 200, tuned.text
    base = api.post(chat, json={**ask, "model": BASE})
    assert base.status_code == 200, base.text
    assert (
        tuned.json()["choices"][0]["message"]["content"]
        != (base.json()["choices"][0]["message"]["content"])
    )
    again = api.post(chat, json={**ask, "model": "colours"}).json()
    assert again["choices"][0]["message"] == tuned.json()["choices"][0]["message"]  # greedy

    with api.stream("POST", chat, json={**ask, "model": "colours", "stream": True}) as r:
        lines = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    streamed = "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content", "") for line in lines[:-1]
    )
    assert streamed == tuned.json()["choices"][0]["message"]["content"]

    missing = api.post(chat, json={**ask, "model": "nobody"})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "NotFoundError"

    workers = api.get(f"/v2/serverless/{ep['id']}/workers").json()
    assert workers["summary"]["coldStarts"] == 1 and len(workers["workers"]) == 1
    assert workers["workers"][0]["status"] == "IDLE"
    sb.advance_clock(61)  # past idleTimeout: the worker scales to zero
    assert api.get(f"/v2/serverless/{ep['id']}/workers").json()["workers"] == []
    api.post(chat, json={**ask, "model": "colours"})
    assert api.get(f"/v2/serverless/{ep['id']}/workers").json()["summary"]["coldStarts"] == 2

    ledger = sb.model.ledger.amounts(sb.model.started_at, sb.model.clock.now())
    charged = sum(ledger[("serverless", ep["id"])].values(), Decimal(0))
    assert Decimal(0) < charged < POOL_PRICES["ADA_24"] * 600
    billing = api.get("/v2/billing/serverless", params={"serverlessId": ep["id"]}).json()
    assert abs(sum(r["totalAmount"] for r in billing["records"]) - float(charged)) < 1e-9

    patched = api.patch(f"/v2/serverless/{ep['id']}", json={"workers": {"min": 0, "max": 3}})
    assert patched.json()["workers"]["max"] == 3
    assert api.delete(f"/v2/serverless/{ep['id']}").status_code == 204
    assert api.get("/v2/serverless").json() == []
    assert api.get(f"/v2/serverless/{ep['id']}").status_code == 404


def test_a_key_without_serverless_rights_is_refused(served_volume: Any) -> None:
    sb, volume = served_volume
    key = sb.credentials()
    rw = {"Authorization": f"Bearer {key['api_key']}"}
    ro = {"Authorization": f"Bearer {key['read_only_api_key']}"}
    with httpx.Client(base_url=sb.base_url, timeout=30) as api:
        assert api.post("/v2/serverless", json=_body(volume.id), headers=ro).status_code == 403
        sb.set_faults(serverless_forbidden=True)
        assert api.get("/v2/serverless", headers=rw).status_code == 403
        assert api.get("/v2/pods", headers=rw).status_code == 200


def test_the_control_planes_serverless_adapter_against_the_sandbox(served_volume: Any) -> None:
    """RunPodServing (V1-V3) speaks the sandbox's REST v2: create, find by name, chat, the
    hourly bill equal to the ledger's endpoint charges to the cent, delete until unlisted."""
    from datetime import timedelta

    from adapters.runpod.serverless import RunPodServing
    from application.errors import InsufficientPermissions

    sb, volume = served_volume
    key = sb.credentials()["api_key"]
    serving = RunPodServing(sb.base_url)
    try:
        made = serving.create_endpoint(key, _body(volume.id, name="tensorant-serve-abc"))
        assert [(e.id, e.name) for e in serving.list_endpoints(key)] == [
            (made.id, "tensorant-serve-abc")
        ]
        status, _headers, content = serving.chat(
            key,
            made.id,
            {"model": "colours", "messages": [{"role": "user", "content": "hi"}], "temperature": 0},
            120,
        )
        assert status == 200 and json.loads(content)["choices"][0]["message"]["role"]
        now = sb.model.clock.now()
        records = serving.billing(key, now - timedelta(hours=2), now + timedelta(hours=1))
        ledger = sb.model.ledger.amounts(sb.model.started_at, now + timedelta(hours=1))
        charged = sum(ledger[("serverless", made.id)].values(), Decimal(0))
        billed = sum((r.amount for r in records if r.resource_id == made.id), Decimal(0))
        assert charged > 0 and round(billed, 2) == round(charged, 2)
        serving.delete_endpoint(key, made.id)
        serving.delete_endpoint(key, made.id)  # idempotent: gone is not an error
        assert serving.list_endpoints(key) == []
        sb.set_faults(serverless_forbidden=True)
        with pytest.raises(InsufficientPermissions):
            serving.list_endpoints(key)
    finally:
        serving.close()
