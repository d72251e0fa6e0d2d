"""The simulated training container reports to our callback URL and writes a real adapter.zip."""

from __future__ import annotations

import hashlib
import io
import json
import threading
import time
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
import requests
from botocore.config import Config

from runpod_sandbox import Sandbox

VOLUME = "nv7eu1ro4k"
TRAINER = "tensorant/trainer:0.1"


class Receiver:
    """A tiny control plane: records every trainer callback."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, dict[str, Any]]] = []
        received = self.calls

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                received.append((self.path, self.headers["Authorization"], body))
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *_args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)

    def kinds(self) -> list[str]:
        return [path.rsplit("/", 1)[-1] for path, _, _ in self.calls]

    def wait_for(self, kind: str, timeout: float = 5.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for path, _, body in list(self.calls):
                if path.endswith("/" + kind):
                    return body
            time.sleep(0.02)
        raise AssertionError(f"no /{kind} callback; got {self.kinds()}")


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    r.thread.start()
    yield r
    r.server.shutdown()
    r.server.server_close()


def _env(receiver: Receiver, run_id: str, **extra: str) -> dict[str, str]:
    return {
        "TENSORANT_RUN_ID": run_id,
        "TENSORANT_RUN_TOKEN": "tok-" + run_id,
        "TENSORANT_CALLBACK_URL": receiver.url,
        "TENSORANT_STORAGE_KIND": "runpod_volume",
        "TENSORANT_ADAPTER_KEY": f"runs/{run_id}/adapter.zip",
        **extra,
    }


def _s3(sandbox: Sandbox, endpoint: str, region: str, key: str, secret: str) -> Any:
    # SigV4 explicitly: in us-east-1 boto3 would presign with SigV2, which the sandbox refuses.
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name=region,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        config=Config(
            s3={"addressing_style": "path"},
            signature_version="s3v4",
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


def test_success_reports_logs_progress_and_an_adapter_that_is_on_the_volume(
    sdk: Any, sandbox: Sandbox, receiver: Receiver
) -> None:
    started = time.monotonic()
    pod_id = sdk.create_pod(
        "run-1",
        TRAINER,
        "NVIDIA A100 80GB PCIe",
        network_volume_id=VOLUME,
        env=_env(receiver, "run-1"),
    )["id"]
    exported = receiver.wait_for("exported")
    print(f"trainer success took {time.monotonic() - started:.2f}s wall")
    assert time.monotonic() - started < 3
    kinds = receiver.kinds()
    assert kinds[0] == "logs"
    assert "progress" in kinds
    assert kinds[-1] == "exported"
    assert {auth for _, auth, _ in receiver.calls} == {"Bearer tok-run-1"}
    assert all(c[0].startswith("/v1/trainer/runs/run-1/") for c in receiver.calls)
    phases = [b["phase"] for p, _, b in receiver.calls if p.endswith("/progress")]
    assert phases[-1] == "exporting"
    assert "training" in phases
    assert exported["object_key"] == "runs/run-1/adapter.zip"

    creds = sandbox.credentials()
    eu = next(v for v in creds["volumes"] if v["id"] == VOLUME)
    client = _s3(
        sandbox,
        eu["s3_endpoint_url"],
        "EU-RO-1",
        creds["s3_access_key_id"],
        creds["s3_secret_access_key"],
    )
    data = client.get_object(Bucket=VOLUME, Key="runs/run-1/adapter.zip")["Body"].read()
    assert hashlib.sha256(data).hexdigest() == exported["sha256"]
    assert len(data) == exported["size_bytes"]
    assert set(zipfile.ZipFile(io.BytesIO(data)).namelist()) == {
        "adapter_config.json",
        "adapter_model.safetensors",
        "tensorant.json",
    }
    files = f"{sandbox.base_url}/_sandbox/pods/{pod_id}/files"
    local = requests.get(f"{files}/workspace/data/adapter.zip", timeout=5)
    assert local.content == data


def test_export_fails_reports_failed_but_leaves_the_adapter_for_recovery(
    sdk: Any, sandbox: Sandbox, receiver: Receiver
) -> None:
    requests.post(
        f"{sandbox.base_url}/_sandbox/scenario",
        json={"scenario": "export_fails", "count": 1},
        timeout=5,
    )
    pod_id = sdk.create_pod(
        "run-2",
        TRAINER,
        "NVIDIA GeForce RTX 4090",
        network_volume_id=VOLUME,
        env=_env(receiver, "run-2"),
    )["id"]
    assert receiver.wait_for("failed")["reason"] == "export_failed"
    assert "exported" not in receiver.kinds()
    assert sandbox.read_volume_file(VOLUME, "runs/run-2/adapter.zip")
    sdk.stop_pod(pod_id)
    url = f"{sandbox.base_url}/_sandbox/pods/{pod_id}/files/workspace/data/adapter.zip"
    assert requests.get(url, timeout=5).status_code == 409
    sdk.resume_pod(pod_id, 1)
    assert zipfile.is_zipfile(io.BytesIO(requests.get(url, timeout=5).content))


def test_corrupt_adapter_reports_the_real_sha256_of_bytes_that_are_not_a_zip(
    sdk: Any, sandbox: Sandbox, receiver: Receiver
) -> None:
    sandbox.set_scenario("corrupt_adapter")
    sdk.create_pod(
        "run-3",
        TRAINER,
        "NVIDIA GeForce RTX 4090",
        network_volume_id=VOLUME,
        env=_env(receiver, "run-3"),
    )
    exported = receiver.wait_for("exported")
    data = sandbox.read_volume_file(VOLUME, "runs/run-3/adapter.zip")
    assert data is not None
    assert not zipfile.is_zipfile(io.BytesIO(data))
    assert hashlib.sha256(data).hexdigest() == exported["sha256"]


def test_crash_exits_the_pod_without_a_report(
    sdk: Any, sandbox: Sandbox, receiver: Receiver
) -> None:
    sandbox.set_scenario("crash")
    pod_id = sdk.create_pod(
        "run-4", TRAINER, "NVIDIA GeForce RTX 4090", env=_env(receiver, "run-4")
    )["id"]
    deadline = time.monotonic() + 3
    while sdk.get_pod(pod_id)["desiredStatus"] != "EXITED":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert not {"exported", "failed"} & set(receiver.kinds())


def test_hang_logs_until_the_pod_is_stopped(sdk: Any, sandbox: Sandbox, receiver: Receiver) -> None:
    sandbox.set_scenario("hang")
    pod_id = sdk.create_pod(
        "run-5", TRAINER, "NVIDIA GeForce RTX 4090", env=_env(receiver, "run-5")
    )["id"]
    # Where a trainer that did not hang would export, this one waits on a barrier, printing.
    deadline = time.monotonic() + 10
    while not any("NCCL barrier" in line for _, _, _, line in sandbox.model.pod_logs[pod_id]):
        assert time.monotonic() < deadline, "the trainer never reached the barrier"
        time.sleep(0.05)
    assert "exported" not in receiver.kinds()
    sdk.terminate_pod(pod_id)
    # The container ends (its thread, which makes every report, returns): nothing more comes.
    assert sandbox._trainer is not None
    [container] = [t for t in sandbox._trainer.threads if t.name.endswith(pod_id)]
    container.join(5)
    assert not container.is_alive(), "the trainer kept running after its Pod was terminated"
    assert "exported" not in receiver.kinds()


def test_custom_s3_storage_is_written_through_a_presigned_url(
    sdk: Any, sandbox: Sandbox, receiver: Receiver
) -> None:
    custom = sandbox.credentials()["custom_s3"]
    client = _s3(
        sandbox,
        custom["endpoint_url"],
        custom["region"],
        custom["access_key_id"],
        custom["secret_access_key"],
    )
    url = client.generate_presigned_url(
        "put_object",
        ExpiresIn=600,
        Params={"Bucket": custom["bucket"], "Key": "runs/run-6/adapter.zip"},
    )
    sdk.create_pod(
        "run-6",
        TRAINER,
        "NVIDIA GeForce RTX 4090",
        env=_env(receiver, "run-6", TENSORANT_STORAGE_KIND="s3", TENSORANT_ADAPTER_UPLOAD_URL=url),
    )
    exported = receiver.wait_for("exported")
    data = client.get_object(Bucket=custom["bucket"], Key="runs/run-6/adapter.zip")["Body"].read()
    assert hashlib.sha256(data).hexdigest() == exported["sha256"]


def test_an_unreachable_callback_does_not_kill_the_trainer(sdk: Any, sandbox: Sandbox) -> None:
    env = {
        "TENSORANT_RUN_ID": "run-7",
        "TENSORANT_RUN_TOKEN": "t",
        "TENSORANT_CALLBACK_URL": "http://127.0.0.1:9",
        "TENSORANT_STORAGE_KIND": "runpod_volume",
        "TENSORANT_ADAPTER_KEY": "runs/run-7/adapter.zip",
    }
    sdk.create_pod("run-7", TRAINER, "NVIDIA GeForce RTX 4090", network_volume_id=VOLUME, env=env)
    deadline = time.monotonic() + 8
    while sandbox.read_volume_file(VOLUME, "runs/run-7/adapter.zip") is None:
        assert time.monotonic() < deadline
        time.sleep(0.05)
