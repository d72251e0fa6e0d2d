"""A network volume is a folder that the sandbox's S3 API serves; the simulated trainer speaks the
trainer's contract (stdout report lines, the mailbox, a valid LoRA adapter)."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from domain.lora import CATALOGUE_ARCHITECTURES, AdapterRejected, verify_adapter
from runpod_sandbox import Sandbox
from runpod_sandbox.tenants import key_for
from trainer.protocol.reports import Status, parse_report_line, report_from_json

VOLUME = "nv7eu1ro4k"
TRAINER = "tensorant/trainer:0.1"
QWEN = "Qwen/Qwen2.5-0.5B-Instruct"


def volume_client(sandbox: Sandbox) -> Any:
    creds = sandbox.credentials()
    eu = next(v for v in creds["volumes"] if v["id"] == VOLUME)
    return boto3.client(
        "s3",
        endpoint_url=eu["s3_endpoint_url"],
        region_name="EU-RO-1",
        aws_access_key_id=creds["s3_access_key_id"],
        aws_secret_access_key=creds["s3_secret_access_key"],
        config=Config(
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


def test_a_file_written_in_the_volume_folder_is_an_object_and_an_object_is_a_file(
    sandbox: Sandbox,
) -> None:
    s3 = volume_client(sandbox)
    folder = sandbox.volume_path(VOLUME)
    (folder / "runs" / "r1").mkdir(parents=True)
    (folder / "runs" / "r1" / "status.json").write_bytes(b'{"step": 1}')
    assert s3.get_object(Bucket=VOLUME, Key="runs/r1/status.json")["Body"].read() == b'{"step": 1}'
    listed = s3.list_objects_v2(Bucket=VOLUME, Prefix="runs/r1/")
    assert [o["Key"] for o in listed["Contents"]] == ["runs/r1/status.json"]
    # Rewritten on disk: S3 serves the new bytes.
    (folder / "runs" / "r1" / "status.json").write_bytes(b'{"step": 22}')
    assert s3.head_object(Bucket=VOLUME, Key="runs/r1/status.json")["ContentLength"] == 12

    s3.put_object(Bucket=VOLUME, Key="datasets/d.jsonl", Body=b'{"messages": []}\n')
    assert (folder / "datasets" / "d.jsonl").read_bytes() == b'{"messages": []}\n'
    s3.upload_fileobj(io.BytesIO(b"x" * (9 * 1024 * 1024)), VOLUME, "models/m/w.bin")  # multipart
    assert (folder / "models" / "m" / "w.bin").stat().st_size == 9 * 1024 * 1024

    s3.delete_object(Bucket=VOLUME, Key="datasets/d.jsonl")
    assert not (folder / "datasets" / "d.jsonl").exists()
    (folder / "runs" / "r1" / "status.json").unlink()
    assert "Contents" not in s3.list_objects_v2(Bucket=VOLUME, Prefix="runs/r1/")


def _wait_file(sandbox: Sandbox, key: str, timeout: float = 8.0) -> bytes:
    deadline = time.monotonic() + timeout
    while (data := sandbox.read_volume_file(VOLUME, key)) is None:
        assert time.monotonic() < deadline, f"{key} never appeared"
        time.sleep(0.05)
    return data


def _manifest(run_id: str, **hyper: Any) -> dict[str, Any]:
    return {
        "version": 1,
        "run_id": run_id,
        "kind": "trial",
        "storage": "runpod_volume",
        "base_model": {"source": "hub", "id": QWEN},
        "dataset": {"object_key": "datasets/d.jsonl", "sha256": "0" * 64, "format": "chat"},
        "hyperparameters": hyper,
        "trial": {"max_rows": 10, "max_steps": 5},
        "adapter": {"object_key": f"runs/{run_id}/adapter.zip"},
        "recovery_path": "/workspace/data/adapter.zip",
    }


def test_the_simulated_trainer_keeps_the_mailbox_prints_report_lines_and_exports_a_valid_lora(
    sdk: Any, sandbox: Sandbox
) -> None:
    run_id = "run-contract"
    sandbox.write_volume_file(
        VOLUME,
        f"runs/{run_id}/manifest.json",
        json.dumps(
            _manifest(run_id, lora_r=4, lora_alpha=8, target_modules=["q_proj", "k_proj"])
        ).encode(),
    )
    env = {
        "TENSORANT_RUN_ID": run_id,
        "TENSORANT_RUN_TOKEN": "t",
        "TENSORANT_CALLBACK_URL": "http://127.0.0.1:9",  # closed: the mailbox is enough
        "TENSORANT_MANIFEST": f"file:///workspace/runs/{run_id}/manifest.json",
    }
    pod_id = sdk.create_pod(
        run_id,
        TRAINER,
        "NVIDIA GeForce RTX 4090",
        network_volume_id=VOLUME,
        volume_mount_path="/workspace",
        env=env,
    )["id"]
    result = report_from_json(json.loads(_wait_file(sandbox, f"runs/{run_id}/result.json")))
    assert result.type == "exported"
    status = Status.from_json(json.loads(_wait_file(sandbox, f"runs/{run_id}/status.json")))
    assert status.run_id == run_id
    assert status.progress.phase == "exporting"
    chunks = sorted(
        (sandbox.volume_path(VOLUME) / "runs" / run_id / "logs").glob(f"{result.boot}-*.jsonl")
    )
    logged = [report_from_json(json.loads(x)) for c in chunks for x in c.read_text().splitlines()]
    assert any("loss=" in getattr(r, "text", "") for r in logged)

    # stdout (the Pod's log) carries every report as a contract line, in seq order.
    lines = [e[3] for e in sandbox.model.pod_logs[pod_id] if e[2] == "container"]
    reports = [r for r in map(parse_report_line, lines) if r is not None]
    assert [r.seq for r in reports] == list(range(1, len(reports) + 1))
    assert reports[-1] == result
    assert {r.seq for r in logged} <= {r.seq for r in reports}

    # The adapter is a LoRA for the manifest's base model, r and targets: the verifier accepts it.
    data = _wait_file(sandbox, f"runs/{run_id}/adapter.zip")
    summary = verify_adapter(
        io.BytesIO(data),
        base_model=QWEN,
        architecture=CATALOGUE_ARCHITECTURES[QWEN],
        sha256=getattr(result, "sha256", None),
        size_bytes=getattr(result, "size_bytes", None),
    )
    assert (summary.r, summary.target_modules) == (4, ("q_proj", "k_proj"))
    assert sandbox.read_volume_file(VOLUME, "data/adapter.zip") == data  # the recovery path


def test_without_a_manifest_the_env_names_the_base_model_and_a_corrupt_adapter_is_rejected(
    sdk: Any, sandbox: Sandbox
) -> None:
    model = "meta-llama/Llama-3.2-3B-Instruct"
    env = {"TENSORANT_RUN_ID": "run-env", "TENSORANT_BASE_MODEL": model}
    sdk.create_pod("run-env", TRAINER, "NVIDIA GeForce RTX 4090", network_volume_id=VOLUME, env=env)
    _wait_file(sandbox, "runs/run-env/result.json")
    data = _wait_file(sandbox, "runs/run-env/adapter.zip")
    arch = CATALOGUE_ARCHITECTURES[model]
    assert verify_adapter(io.BytesIO(data), base_model=model, architecture=arch).r == 8
    with pytest.raises(AdapterRejected) as wrong:
        verify_adapter(io.BytesIO(data), base_model=QWEN, architecture=arch)
    assert wrong.value.reason == "adapter_wrong_base_model"

    sandbox.set_scenario("corrupt_adapter")
    env = {"TENSORANT_RUN_ID": "run-bad", "TENSORANT_BASE_MODEL": model}
    sdk.create_pod("run-bad", TRAINER, "NVIDIA GeForce RTX 4090", network_volume_id=VOLUME, env=env)
    _wait_file(sandbox, "runs/run-bad/result.json")
    bad = _wait_file(sandbox, "runs/run-bad/adapter.zip")
    with pytest.raises(AdapterRejected) as broken:
        verify_adapter(io.BytesIO(bad), base_model=model, architecture=arch)
    assert broken.value.reason == "adapter_not_zip"


def test_on_custom_s3_the_mailbox_goes_through_the_manifests_presigned_urls(
    sdk: Any, sandbox: Sandbox
) -> None:
    custom = sandbox.credentials()["custom_s3"]
    s3 = boto3.client(
        "s3",
        endpoint_url=custom["endpoint_url"],
        region_name=custom["region"],
        aws_access_key_id=custom["access_key_id"],
        aws_secret_access_key=custom["secret_access_key"],
        config=Config(
            s3={"addressing_style": "path"},
            signature_version="s3v4",
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )
    bucket, run_id = custom["bucket"], "run-s3"

    def url(method: str, key: str) -> str:
        params = {"Bucket": bucket, "Key": f"runs/{run_id}/{key}"}
        return str(s3.generate_presigned_url(method, Params=params, ExpiresIn=600))

    manifest = _manifest(run_id)
    manifest["storage"] = "s3"
    manifest["dataset"]["url"] = url("get_object", "dataset.jsonl")
    manifest["adapter"]["upload_url"] = url("put_object", "adapter.zip")
    manifest["mailbox"] = {
        "status_url": url("put_object", "status.json"),
        "result_url": url("put_object", "result.json"),
        "log_urls": [url("put_object", f"logs/pool-{i:05d}.jsonl") for i in range(3)],
    }
    s3.put_object(Bucket=bucket, Key=f"runs/{run_id}/manifest.json", Body=json.dumps(manifest))
    env = {"TENSORANT_RUN_ID": run_id, "TENSORANT_MANIFEST": url("get_object", "manifest.json")}
    sdk.create_pod(run_id, TRAINER, "NVIDIA GeForce RTX 4090", env=env)

    deadline = time.monotonic() + 10
    while True:
        try:
            raw = s3.get_object(Bucket=bucket, Key=f"runs/{run_id}/result.json")["Body"].read()
            break
        except s3.exceptions.NoSuchKey:
            assert time.monotonic() < deadline
            time.sleep(0.1)
    result = report_from_json(json.loads(raw))
    assert result.type == "exported"
    data = s3.get_object(Bucket=bucket, Key=f"runs/{run_id}/adapter.zip")["Body"].read()
    summary = verify_adapter(
        io.BytesIO(data), base_model=QWEN, architecture=CATALOGUE_ARCHITECTURES[QWEN]
    )
    assert summary.r == 16  # the manifest's defaults: r=16 on all seven projections
    assert len(summary.target_modules) == 7
    status = Status.from_json(
        json.loads(s3.get_object(Bucket=bucket, Key=f"runs/{run_id}/status.json")["Body"].read())
    )
    assert status.progress.phase == "exporting"
    listed = s3.list_objects_v2(Bucket=bucket, Prefix=f"runs/{run_id}/logs/")
    assert len(listed["Contents"]) == 3  # the pool's last URL keeps the newest chunk


def test_a_volume_made_through_rest_v2_is_reached_by_the_runpod_s3_key_and_custom_s3_is_not(
    sandbox: Sandbox,
) -> None:
    """RunPod's S3 API key reaches every network volume of the account, those made after it
    too; it never reaches a bucket outside RunPod. Another user (a tenant key) neither lists
    nor reads a volume it did not make."""
    creds = sandbox.credentials()

    def v2(method: str, path: str, key: str, **kw: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}"}
        return httpx.request(method, f"{sandbox.base_url}/v2{path}", headers=headers, **kw)

    made = v2(
        "POST",
        "/network-volumes",
        creds["api_key"],
        json={"name": "later", "size": 10, "dataCenter": "EU-RO-1"},
    )
    assert made.status_code == 201, made.text
    later = made.json()["id"]
    other = key_for(creds["api_key"], "someone-else")
    assert later in [
        x["id"] for x in v2("GET", "/network-volumes", creds["api_key"]).json()["networkVolumes"]
    ]
    assert later not in [
        x["id"] for x in v2("GET", "/network-volumes", other).json()["networkVolumes"]
    ]
    assert v2("GET", f"/network-volumes/{later}", other).status_code == 404
    s3 = volume_client(sandbox)
    s3.put_object(Bucket=later, Key="datasets/d.jsonl", Body=b"{}\n")
    assert (sandbox.volume_path(later) / "datasets" / "d.jsonl").read_bytes() == b"{}\n"
    assert later in [b["Name"] for b in s3.list_buckets()["Buckets"]]
    with pytest.raises(ClientError) as denied:
        s3.list_objects_v2(Bucket=creds["custom_s3"]["bucket"])
    assert denied.value.response["Error"]["Code"] in ("AccessDenied", "NoSuchBucket")
