"""P2 over HTTP: the base-model catalogue, models found on the organization's storage (memory
need from their config.json, used by GPU eligibility) and gated Hub models refused at draft."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import Api, Org, problem
from tests.e2e.flows import private_stack, ready, volume_objects

VOLUME = "nv7eu1ro4k"
TINY = {
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 512,
    "max_position_embeddings": 256,
    "tie_word_embeddings": True,
}
# Llama-3.3-70B's numbers: about 70 B parameters, more than one A100 holds for LoRA.
HUGE = TINY | {
    "hidden_size": 8192,
    "intermediate_size": 28672,
    "num_hidden_layers": 80,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "tie_word_embeddings": False,
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, Org, dict[str, Any]]]:
    with private_stack(tmp_path_factory, "base-models") as (api, _console):
        creds = api.sandbox.credentials()
        org, config = ready(api, creds)
        s3 = volume_objects(creds)
        for folder, cfg in (("tiny", TINY), ("huge", HUGE)):
            s3.put_object(Bucket=VOLUME, Key=f"models/{folder}/config.json", Body=json.dumps(cfg))
        s3.put_object(Bucket=VOLUME, Key="models/broken/config.json", Body=b"{not json")
        yield api, org, config


def test_p2_the_catalogue_and_the_storage_models_are_listed(
    world: tuple[Api, Org, dict[str, Any]],
) -> None:
    _api, org, _config = world
    models = {m["id"]: m for m in org.auditor.get("/v1/base-models").json()}
    qwen = models["Qwen/Qwen2.5-7B-Instruct"]
    assert qwen["source"] == "hub" and qwen["gated"] is False and qwen["lora_memory_gb"] == 22
    assert qwen["license"] == "apache-2.0" and qwen["context_length"] == 32768
    assert models["meta-llama/Llama-3.1-8B-Instruct"]["gated"] is True
    tiny = models["storage:models/tiny"]
    assert tiny["source"] == "storage" and tiny["context_length"] == 256
    assert 0 < tiny["parameters_b"] < 0.001 and tiny["lora_memory_gb"] == 2
    huge = models["storage:models/huge"]
    assert 65 < huge["parameters_b"] < 75 and huge["lora_memory_gb"] > 80
    assert "storage:models/broken" not in models  # a config.json that is not JSON is skipped


def test_p2_gated_hub_models_are_refused_at_draft_with_a_clear_reason(
    world: tuple[Api, Org, dict[str, Any]],
) -> None:
    _api, org, config = world
    llama = {**config, "base_model": "meta-llama/Llama-3.1-8B-Instruct"}
    body = problem(org.member.post("/v1/runs", json=llama), 422, "base-model-gated")
    assert "Hugging Face" in body["detail"] and "Qwen/Qwen2.5-7B-Instruct" in body["detail"]


def test_p2_a_storage_model_drafts_with_its_estimated_memory_and_a_missing_one_is_refused(
    world: tuple[Api, Org, dict[str, Any]],
) -> None:
    _api, org, config = world
    r = org.member.post("/v1/runs", json={**config, "base_model": "storage:models/tiny"})
    assert r.status_code == 201, r.text
    problem(
        org.member.post("/v1/runs", json={**config, "base_model": "storage:models/huge"}),
        422,
        "gpu-memory-too-small",
    )
    problem(
        org.member.post("/v1/runs", json={**config, "base_model": "storage:models/nowhere"}),
        422,
        "invalid-base-model",
    )
    problem(
        org.member.post("/v1/runs", json={**config, "base_model": "storage:../etc"}),
        422,
        "invalid-base-model",
    )
