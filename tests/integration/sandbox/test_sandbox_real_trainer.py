"""The real trainer (`python -m trainer`) as a sandbox Pod's container, on a tiny model on the CPU:
it reads its manifest from the network volume's folder, trains, and its mailbox, adapter and
stdout reach a client only through the sandbox's S3 API and REST v2 Pod logs."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import boto3
import httpx
import pytest
from botocore.config import Config

from domain.lora import Architecture, verify_adapter
from runpod_sandbox import Sandbox
from tests.trainer.fixtures import HYPERPARAMETERS, TINY, make_workspace
from trainer.protocol import volume_manifest_url
from trainer.protocol.reports import Exported, Progress, parse_report_line, report_from_json

VOLUME = "nv7eu1ro4k"


@pytest.fixture
def real() -> Iterator[Sandbox]:
    with Sandbox(startup_seconds=0.05, trainer="real", stop_grace_seconds=10) as sb:
        yield sb


def s3_client(sandbox: Sandbox) -> Any:
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


# ~30 s on an idle 2-core machine; minutes when other suites load it, hence the long limits.
@pytest.mark.timeout(900)
def test_a_real_trainer_pod_trains_to_result_json_seen_through_s3_and_the_pod_log(
    real: Sandbox, tiny_model: Path
) -> None:
    run_id = "real-1"
    make_workspace(
        real.volume_path(VOLUME),
        tiny_model,
        run_id=run_id,
        hyperparameters=replace(HYPERPARAMETERS, max_steps=6),
    )
    key = real.credentials()["api_key"]
    api = httpx.Client(
        base_url=real.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    body = {
        "name": f"tensorant-{run_id}",
        "image": "tensorant/trainer:1.0",
        "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1},
        "dataCenterIds": ["EU-RO-1"],
        "mounts": {"network": [{"volumeId": VOLUME, "path": "/workspace"}]},
        "env": {
            "TENSORANT_RUN_ID": run_id,
            "TENSORANT_RUN_TOKEN": "token-of-real-1",
            "TENSORANT_CALLBACK_URL": "http://127.0.0.1:9",  # closed: no callback ever arrives
            "TENSORANT_MANIFEST": volume_manifest_url(run_id),
            "TENSORANT_PROGRESS_SECONDS": "0",
            "TENSORANT_LOG_FLUSH_SECONDS": "0.2",
        },
    }
    started = time.monotonic()
    pod_id = api.post("/v2/pods", json=body).json()["id"]
    s3 = s3_client(real)
    result: dict[str, Any] | None = None
    while result is None:
        assert time.monotonic() - started < 600, "\n".join(
            e[3] for e in real.model.pod_logs[pod_id]
        )[-3000:]
        try:
            raw = s3.get_object(Bucket=VOLUME, Key=f"runs/{run_id}/result.json")["Body"].read()
            result = json.loads(raw)
        except s3.exceptions.NoSuchKey:
            time.sleep(0.5)
    print(f"real trainer pod: result.json after {time.monotonic() - started:.1f}s")
    final = report_from_json(result)
    assert isinstance(final, Exported), result
    assert not final.partial

    # The adapter, read through S3, is a LoRA for the tiny model by the control plane's rules.
    data = s3.get_object(Bucket=VOLUME, Key=final.object_key)["Body"].read()
    config = json.loads((tiny_model / "config.json").read_text())
    summary = verify_adapter(
        io.BytesIO(data),
        base_model=f"storage:{TINY}",
        architecture=Architecture.from_config(config),
        sha256=final.sha256,
        size_bytes=final.size_bytes,
    )
    assert summary.r == HYPERPARAMETERS.lora_r
    status = json.loads(
        s3.get_object(Bucket=VOLUME, Key=f"runs/{run_id}/status.json")["Body"].read()
    )
    assert status["run_id"] == run_id and status["pod_id"] == pod_id

    # Stop: the idle trainer exits on SIGTERM; the volume keeps everything.
    assert api.post(f"/v2/pods/{pod_id}/action", json={"action": "stop"}).status_code == 200
    deadline = time.monotonic() + 15
    while real.runner.alive(pod_id):
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert real.read_volume_file(VOLUME, final.object_key) == data

    # The Pod's log (REST v2 SSE) is the trainer's stdout: every report line, the final one last.
    events = []
    with api.stream("GET", f"/v2/pods/{pod_id}/logs", params={"tail": 5000}) as answer:
        for line in answer.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    reports = [parse_report_line(e["line"]) for e in events if e["source"] == "container"]
    reports_seen = [r for r in reports if r is not None]
    assert reports_seen[-1] == final
    losses = [r.loss for r in reports_seen if isinstance(r, Progress) and r.loss is not None]
    assert len(losses) >= 2
    assert any("SIGTERM" in e["line"] for e in events if e["source"] == "container")
    api.close()
