"""The training container of `tensorant/trainer*` Pods, simulated by one thread per Pod.

It reads only the Pod's env, as the real container would:
TENSORANT_RUN_ID, TENSORANT_RUN_TOKEN, TENSORANT_CALLBACK_URL, TENSORANT_STORAGE_KIND
(`runpod_volume` | `s3`), TENSORANT_ADAPTER_KEY, TENSORANT_ADAPTER_UPLOAD_URL (s3 only),
TENSORANT_BASE_MODEL (optional, written into adapter_config.json).
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import struct
import threading
import uuid
import zipfile
from typing import Any

import requests

from . import seed
from .billing_api import iso
from .model import RUNNING, Pod, SandboxModel

log = logging.getLogger(__name__)
POD_ADAPTER_PATH = "workspace/data/adapter.zip"
TOTAL_STEPS = 5


def build_adapter_zip(run_id: str, base_model: str) -> bytes:
    """A small but well-formed PEFT adapter: adapter_config.json + adapter_model.safetensors."""
    tensor = struct.pack("<4f", 0.01, -0.02, 0.03, -0.04)
    header = json.dumps(
        {
            "base_model.model.layers.0.self_attn.q_proj.lora_A.weight": {
                "dtype": "F32",
                "shape": [2, 2],
                "data_offsets": [0, len(tensor)],
            },
            "__metadata__": {"format": "pt", "run_id": run_id},
        }
    ).encode()
    safetensors = struct.pack("<Q", len(header)) + header + tensor
    config = {
        "peft_type": "LORA",
        "base_model_name_or_path": base_model,
        "r": 8,
        "lora_alpha": 16,
        "lora_dropout": 0.05,
        "target_modules": ["q_proj", "v_proj"],
        "task_type": "CAUSAL_LM",
        "tensorant_run_id": run_id,
    }
    buf = io.BytesIO()
    # A fixed timestamp makes the same run's adapter byte-identical (stable sha256).
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in (
            ("adapter_config.json", json.dumps(config, indent=2).encode()),
            ("adapter_model.safetensors", safetensors),
        ):
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    return buf.getvalue()


class Trainer:
    """Starts the container thread when a trainer Pod is created; Stop/terminate end it."""

    def __init__(self, model: SandboxModel, base_url: str, step_seconds: float = 0.08) -> None:
        self.model = model
        self.base_url = base_url
        self.step_seconds = step_seconds
        self.threads: list[threading.Thread] = []
        self.volume_writer: Any = None  # fallback for volumes without an S3 API (set by Sandbox)

    def launch(self, pod: Pod) -> None:
        thread = threading.Thread(
            target=self._run_safely, args=(pod,), daemon=True, name=f"sandbox-trainer-{pod.id}"
        )
        self.threads.append(thread)
        thread.start()

    def stop_all(self, timeout: float = 1.0) -> None:
        for pod in list(self.model.pods.values()):
            pod.stop_event.set()
        for thread in self.threads:
            thread.join(timeout)

    def _run_safely(self, pod: Pod) -> None:
        try:
            self._run(pod)
        except Exception:  # the container dying must never take the sandbox down
            log.exception("sandbox trainer for pod %s failed", pod.id)

    def _run(self, pod: Pod) -> None:
        stop = pod.stop_event
        while not self.model.runtime_ready(pod):
            if stop.wait(0.02) or pod.desired_status != RUNNING:
                return
        with self.model.lock:
            if pod.trainer_ran:  # resumed Pods idle: the sandbox image trains once per Pod
                return
            pod.trainer_ran = True
        env = {**pod.env, "RUNPOD_POD_ID": pod.id}  # RunPod sets it in every Pod
        cb = Callbacks(env, self.model)
        scenario = pod.scenario or "success"
        cb.logs(
            f"tensorant trainer starting (scenario={scenario})",
            f"pod {pod.id} on {pod.gpu_display_name} in {pod.datacenter_id}",
            "loading base model and dataset",
        )
        if scenario == "crash":
            cb.logs("RuntimeError: CUDA error: an illegal memory access was encountered")
            stop.wait(self.step_seconds)
            self.model.container_exited(pod.id)
            return
        for step in range(1, TOTAL_STEPS + 1):
            if stop.wait(self.step_seconds):
                return
            cb.post("progress", {"phase": "training", "step": step, "total_steps": TOTAL_STEPS})
            cb.logs(f"step {step}/{TOTAL_STEPS} loss={2.0 / step:.4f}")
        if scenario == "hang":
            while not stop.wait(0.25):
                cb.logs("waiting on NCCL barrier ...")
            return
        self._export(pod, env, cb, scenario)

    def _export(self, pod: Pod, env: dict[str, str], cb: Callbacks, scenario: str) -> None:
        cb.post("progress", {"phase": "exporting", "step": TOTAL_STEPS, "total_steps": TOTAL_STEPS})
        run_id = env.get("TENSORANT_RUN_ID", pod.id)
        data = build_adapter_zip(run_id, env.get("TENSORANT_BASE_MODEL", "sandbox/base-model"))
        if scenario == "corrupt_adapter":
            data = b"this is not a zip file, the export was truncated\x00" + data[:32]
        with self.model.lock:
            pod.files[POD_ADAPTER_PATH] = data
        key = env.get("TENSORANT_ADAPTER_KEY", f"runs/{run_id}/adapter.zip")
        kind = env.get("TENSORANT_STORAGE_KIND", "runpod_volume")
        try:
            if kind == "runpod_volume" and pod.network_volume_id:
                self._write_volume(pod, key, data)
            elif kind == "s3" and scenario != "export_fails":
                upload = requests.put(env["TENSORANT_ADAPTER_UPLOAD_URL"], data=data, timeout=10)
                upload.raise_for_status()
        except Exception as exc:
            cb.logs(f"export failed: {exc}")
            cb.post("failed", {"reason": "export_failed", "detail": str(exc)[:500]})
            return
        if scenario == "export_fails":
            cb.logs("export failed: could not merge adapter weights")
            cb.post(
                "failed",
                {
                    "reason": "export_failed",
                    "detail": f"adapter written to /{POD_ADAPTER_PATH} but export failed",
                },
            )
            return
        cb.logs(f"adapter exported to {key} ({len(data)} bytes)")
        cb.post(
            "exported",
            {
                "object_key": key,
                "sha256": hashlib.sha256(data).hexdigest(),
                "size_bytes": len(data),
            },
        )

    def _write_volume(self, pod: Pod, key: str, data: bytes) -> None:
        volume = self.model.volumes[pod.network_volume_id or ""]
        if not volume.s3_api or self.volume_writer is None:
            if self.volume_writer is not None:
                self.volume_writer(volume.id, key, data)
            return
        # Imported here: boto3 costs ~0.3 s to import and only trainer threads need it.
        import boto3
        from botocore.config import Config

        client = boto3.client(
            "s3",
            endpoint_url=seed.s3_endpoint_for(self.base_url, volume.datacenter_id),
            region_name=volume.datacenter_id,
            aws_access_key_id=seed.S3_ACCESS_KEY_ID,
            aws_secret_access_key=seed.S3_SECRET_ACCESS_KEY,
            config=Config(
                s3={"addressing_style": "path"},
                retries={"max_attempts": 3},
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )
        client.put_object(Bucket=volume.id, Key=key, Body=data)


class Callbacks:
    """POSTs to the control plane; failures are retried a few times, then dropped quietly."""

    def __init__(self, env: dict[str, str], model: SandboxModel) -> None:
        base = env.get("TENSORANT_CALLBACK_URL", "").rstrip("/")
        run_id = env.get("TENSORANT_RUN_ID", "")
        self.url = f"{base}/v1/trainer/runs/{run_id}" if base and run_id else ""
        self.headers = {"Authorization": f"Bearer {env.get('TENSORANT_RUN_TOKEN', '')}"}
        self.model = model
        self.pod_id = env.get("RUNPOD_POD_ID", "")
        self.session = requests.Session()

    def logs(self, *texts: str) -> None:
        now = iso(self.model.clock.now())
        for text in texts:  # also kept for REST v2's log stream
            self.model.append_log(self.pod_id, "container", text)
        # An id per batch, so a retry whose first answer was lost is stored once.
        lines = [{"time": now, "text": t} for t in texts]
        self.post("logs", {"lines": lines, "batch": str(uuid.uuid4())})

    def post(self, what: str, body: dict[str, Any], attempts: int = 3) -> bool:
        if not self.url:
            return False
        for attempt in range(attempts):
            try:
                answer = self.session.post(
                    f"{self.url}/{what}", json=body, headers=self.headers, timeout=5
                )
                if answer.status_code < 500 and answer.status_code != 429:
                    return answer.status_code < 400
            except requests.RequestException:
                pass
            threading.Event().wait(0.02 * (attempt + 1))
        return False
