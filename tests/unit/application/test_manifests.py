"""The run manifest's hyperparameters (T1): per-architecture and per-size defaults, for catalogue
models and for `storage:models/<folder>` models alike (read from the folder's config.json)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from application.manifests import UrlLifetimes, build_manifest, revoke_manifest_urls, write_manifest
from application.ports import S3Credentials, StorageLocation
from application.run_settings import RunSettings
from tests.fakes import S3_ACCESS, S3_SECRET, FakeObjectStore
from trainer.protocol import Hyperparameters, default_hyperparameters

LOCATION = StorageLocation(
    "runpod_volume", "https://s3api-eu-ro-1.runpod.io", "vol1euro", "EU-RO-1"
)
CREDS = S3Credentials(S3_ACCESS, S3_SECRET)


def _config(model_type: str, hidden: int, layers: int, inter: int) -> dict[str, Any]:
    return {
        "model_type": model_type,
        "hidden_size": hidden,
        "intermediate_size": inter,
        "num_hidden_layers": layers,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 8192,
    }


def _hyper(objects: FakeObjectStore, base_model: str) -> Hyperparameters:
    manifest = build_manifest(
        run_id="run-1",
        kind="trial",
        base_model=base_model,
        dataset={"object_key": "datasets/d.jsonl", "sha256": "0" * 64},
        storage_kind="runpod_volume",
        objects=objects,
        location=LOCATION,
        creds=CREDS,
        lifetimes=UrlLifetimes(get_s=3600, put_s=3600),
    )
    return manifest.hyperparameters


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        # ~0.4B Llama: the small-model batch shape
        (_config("llama", 1024, 16, 2816), default_hyperparameters("llama", 0.4)),
        # ~14B Qwen2: two per micro-batch, eight accumulated
        (_config("qwen2", 5120, 48, 13824), default_hyperparameters("qwen2", 14.0)),
        # Gemma 2 trains at the lower learning rate whatever its size
        (_config("gemma2", 2304, 26, 9216), default_hyperparameters("gemma2", 2.6)),
    ],
)
def test_a_storage_model_gets_its_architecture_and_size_defaults(
    config: dict[str, Any], expected: Hyperparameters
) -> None:
    objects = FakeObjectStore()
    objects.buckets["vol1euro"]["models/mine/config.json"] = json.dumps(config).encode()
    got = _hyper(objects, "storage:models/mine")
    assert (got.batch_size, got.gradient_accumulation, got.learning_rate) == (
        expected.batch_size,
        expected.gradient_accumulation,
        expected.learning_rate,
    )


def test_the_defaults_differ_by_size_so_the_test_above_can_fail() -> None:
    small, big = default_hyperparameters("llama", 0.4), default_hyperparameters("qwen2", 14.0)
    assert (small.batch_size, small.gradient_accumulation) != (
        big.batch_size,
        big.gradient_accumulation,
    )
    assert default_hyperparameters("gemma2", 2.6).learning_rate != small.learning_rate


def test_an_unreadable_config_falls_back_to_the_small_llama_defaults() -> None:
    objects = FakeObjectStore()
    objects.buckets["vol1euro"]["models/broken/config.json"] = b"not json"
    assert _hyper(objects, "storage:models/broken") == default_hyperparameters()


def test_a_catalogue_model_gets_its_own_defaults() -> None:
    got = _hyper(FakeObjectStore(), "Qwen/Qwen2.5-7B-Instruct")
    assert got == default_hyperparameters("qwen2", 7.6)


def _budget(objects: FakeObjectStore, base_model: str, gpu_memory_gb: int | None) -> int:
    return build_manifest(
        run_id="run-1",
        kind="trial",
        base_model=base_model,
        dataset={"object_key": "datasets/d.jsonl", "sha256": "0" * 64},
        storage_kind="runpod_volume",
        objects=objects,
        location=LOCATION,
        creds=CREDS,
        lifetimes=UrlLifetimes(get_s=3600, put_s=3600),
        gpu_memory_gb=gpu_memory_gb,
    ).hyperparameters.micro_batch_tokens


def test_the_memory_model_sets_the_tokens_a_forward_pass_holds_on_the_rented_gpu() -> None:
    """Qwen2.5-7B at the defaults: about 3,100 tokens on a 24 GB card (four rows of 2,048 would
    need ~35-40 GB), many more on 80 GB; a storage model is sized from its config.json."""
    from domain.memory import catalogue_shape, memory_need

    objects = FakeObjectStore()
    on_24 = _budget(objects, "Qwen/Qwen2.5-7B-Instruct", 24)
    on_80 = _budget(objects, "Qwen/Qwen2.5-7B-Instruct", 80)
    assert 2048 <= on_24 < 4096 < on_80
    shape = catalogue_shape("Qwen/Qwen2.5-7B-Instruct")
    assert shape is not None
    assert memory_need(shape, on_24).total_gib <= 24 < memory_need(shape, on_24 + 64).total_gib
    assert _budget(objects, "Qwen/Qwen2.5-7B-Instruct", None) == 0  # no GPU: whole micro-batches
    objects.buckets["vol1euro"]["models/mine/config.json"] = json.dumps(
        _config("llama", 4096, 32, 14336)
    ).encode()
    assert 2048 <= _budget(objects, "storage:models/mine", 24) < on_80


class _Expiring(FakeObjectStore):
    """Presigned URLs that say how long they live."""

    def presign_put(
        self, location: StorageLocation, credentials: S3Credentials, key: str, expires_s: int
    ) -> str:
        return f"https://presigned.invalid/{key}?put&expires={expires_s}"

    def presign_get(
        self, location: StorageLocation, credentials: S3Credentials, key: str, expires_s: int
    ) -> str:
        return f"https://presigned.invalid/{key}?get&expires={expires_s}"


def test_n1_each_presigned_url_lives_as_long_as_its_use_and_is_withdrawn_once_verified() -> None:
    lifetimes = UrlLifetimes.of(60, RunSettings(boot_deadline_s=1500, stop_after_grace_s=600))
    assert lifetimes == UrlLifetimes(get_s=1500 + 1800, put_s=3600 + 600)
    objects = _Expiring()
    custom = StorageLocation("s3", "https://s3.example.com", "mine", "us-east-1")
    objects.buckets["mine"] = {}
    manifest = build_manifest(
        run_id="run-1",
        kind="trial",
        base_model="Qwen/Qwen2.5-7B-Instruct",
        dataset={"object_key": "datasets/p/d.jsonl", "sha256": "0" * 64},
        storage_kind="s3",
        objects=objects,
        location=custom,
        creds=CREDS,
        lifetimes=lifetimes,
    )
    assert manifest.dataset.url is not None and manifest.dataset.url.endswith("expires=3300")
    assert manifest.adapter.upload_url is not None
    assert manifest.adapter.upload_url.endswith("expires=4200")
    assert manifest.mailbox is not None and manifest.mailbox.result_url.endswith("expires=4200")
    env = write_manifest(objects, custom, CREDS, manifest)
    assert env.endswith(f"expires={7 * 24 * 3600}")  # a resumed Pod reads it again
    revoke_manifest_urls(objects, custom, CREDS, "run-1")
    text = objects.get(custom, CREDS, "runs/run-1/manifest.json").decode()
    assert "presigned.invalid" not in text and "mailbox" not in text
    assert json.loads(text)["adapter"]["object_key"] == "runs/run-1/adapter.zip"
