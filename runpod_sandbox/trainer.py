"""The training container of `tensorant/trainer*` Pods, simulated by one thread per Pod.

It speaks the trainer's contract (API.md, "The training container") without training anything:
- reads the Pod's env and, when it exists, the run manifest (TENSORANT_MANIFEST: a file under the
  Pod's `/workspace` mount, or a presigned GET); without one it falls back to the env the control
  plane set before manifests existed (TENSORANT_STORAGE_KIND, TENSORANT_ADAPTER_KEY,
  TENSORANT_ADAPTER_UPLOAD_URL, TENSORANT_BASE_MODEL);
- prints every report as `TENSORANT-REPORT <compact JSON>` on stdout (the Pod's log), keeps the
  mailbox under `runs/<id>/` (status.json heartbeat, log chunks, result.json last) on the volume
  folder or through the manifest's presigned PUTs, and POSTs the callbacks when they answer;
- exports a valid LoRA adapter for the run's base model to /workspace/data/adapter.zip and to the
  adapter key. Scenarios (`export_fails`, `hang`, `corrupt_adapter`, `crash`,
  `silent_after_start`) break it on purpose; with `image_pull_fails` and `cuda_mismatch` the
  container never starts and only RunPod's system lines say why.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import requests

from .lora_adapter import (
    CATALOGUE,
    DEFAULT_ALPHA,
    DEFAULT_R,
    DEFAULT_TARGETS,
    FALLBACK,
    LORA_MODULES,
    Architecture,
    build_adapter_zip,
)
from .model import RUNNING, Pod, SandboxModel

log = logging.getLogger(__name__)
POD_ADAPTER_PATH = "workspace/data/adapter.zip"
RECOVERY_KEY = "data/adapter.zip"  # /workspace/data/adapter.zip on the volume
REPORT_PREFIX = "TENSORANT-REPORT "
TOTAL_STEPS = 5
_BATCH_NAMESPACE = uuid.UUID("1b0d3c9a-3f0e-4d35-9a43-6f8a3c0b7e21")  # as the trainer's

__all__ = ["POD_ADAPTER_PATH", "TOTAL_STEPS", "Trainer", "build_adapter_zip", "format_report_line"]


def utc(t: datetime) -> str:
    """UTC ISO 8601 with milliseconds and `Z`, as every time in the contract."""
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def dumps(body: dict[str, Any]) -> str:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def format_report_line(report: dict[str, Any]) -> str:
    """`TENSORANT-REPORT <compact JSON>`: the stdout form of a report (API.md)."""
    return REPORT_PREFIX + dumps(report)


def write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{threading.get_ident()}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _safe_key(key: str) -> list[str]:
    parts = [p for p in key.split("/") if p]
    if not parts or key.startswith("/") or ".." in parts:
        raise ValueError(f"unsafe storage key {key!r}")
    return parts


class RunSpec:
    """What this run is: from the manifest when there is one, else from the Pod's env."""

    def __init__(self, env: dict[str, str], workspace: Path, mount: str) -> None:
        self.run_id = env.get("TENSORANT_RUN_ID", "")
        manifest = self._manifest(env.get("TENSORANT_MANIFEST", ""), workspace, mount)
        self.manifest = manifest
        hp = (manifest or {}).get("hyperparameters") or {}
        base = (manifest or {}).get("base_model") or {}
        if manifest is not None:
            default = "s3" if manifest.get("mailbox") else "runpod_volume"
            self.storage = str(manifest.get("storage") or default)
        else:
            self.storage = env.get("TENSORANT_STORAGE_KIND") or "runpod_volume"
        if base.get("id"):
            self.base_model = str(base["id"])
        elif base.get("path"):
            self.base_model = f"storage:{base['path']}"
        else:
            self.base_model = env.get("TENSORANT_BASE_MODEL") or "sandbox/base-model"
        # A manifest's defaults are the trainer's (r=16, alpha 32, all seven projections).
        r, alpha, targets = (
            (16, 32.0, LORA_MODULES)
            if manifest is not None
            else (DEFAULT_R, DEFAULT_ALPHA, DEFAULT_TARGETS)
        )
        self.r = int(hp.get("lora_r") or r)
        self.alpha = float(hp.get("lora_alpha") or alpha)
        self.targets = tuple(hp.get("target_modules") or targets)
        adapter = (manifest or {}).get("adapter") or {}
        self.adapter_key = str(
            adapter.get("object_key")
            or env.get("TENSORANT_ADAPTER_KEY")
            or f"runs/{self.run_id}/adapter.zip"
        )
        self.upload_url = adapter.get("upload_url") or env.get("TENSORANT_ADAPTER_UPLOAD_URL")
        mailbox = (manifest or {}).get("mailbox") or {}
        self.status_url: str | None = mailbox.get("status_url")
        self.result_url: str | None = mailbox.get("result_url")
        self.log_urls: list[str] = list(mailbox.get("log_urls") or [])
        self.arch = self._architecture(base, workspace)

    @staticmethod
    def _manifest(url: str, workspace: Path, mount: str) -> dict[str, Any] | None:
        try:
            if url.startswith("file://"):
                path = url[len("file://") :]
                prefix = mount.rstrip("/") + "/"
                if not path.startswith(prefix):
                    return None
                data = workspace.joinpath(*_safe_key(path[len(prefix) :])).read_bytes()
            elif url.startswith(("http://", "https://")):
                answer = requests.get(url, timeout=10)
                if answer.status_code != 200:
                    return None
                data = answer.content
            else:
                return None
            body = json.loads(data)
        except (OSError, ValueError, requests.RequestException):
            return None
        return body if isinstance(body, dict) else None

    def _architecture(self, base: dict[str, Any], workspace: Path) -> Architecture:
        if self.base_model in CATALOGUE:
            return CATALOGUE[self.base_model]
        config: Any = None
        try:
            if base.get("url_by_file", {}).get("config.json"):
                config = requests.get(base["url_by_file"]["config.json"], timeout=10).json()
            elif base.get("path"):
                config = json.loads(
                    workspace.joinpath(*_safe_key(base["path"]), "config.json").read_bytes()
                )
            return Architecture.from_config(config)
        except (OSError, ValueError, KeyError, TypeError, requests.RequestException):
            return FALLBACK


class Channels:
    """One report, three channels: stdout (the Pod's log), the mailbox and the callbacks."""

    def __init__(self, model: SandboxModel, pod: Pod, spec: RunSpec, workspace: Path) -> None:
        self.model = model
        self.pod = pod
        self.spec = spec
        self.workspace = workspace
        self.boot = uuid.uuid4().hex[:16]
        self.seq = 0
        self.attempt = 1
        self.progress_body: dict[str, Any] | None = None
        self.pool_next = 0
        env = pod.env
        base = env.get("TENSORANT_CALLBACK_URL", "").rstrip("/")
        self.url = f"{base}/v1/trainer/runs/{spec.run_id}" if base and spec.run_id else ""
        self.headers = {"Authorization": f"Bearer {env.get('TENSORANT_RUN_TOKEN', '')}"}
        self.session = requests.Session()
        # as the real trainer's sender (trainer/callbacks.py): after a failure, callbacks wait
        # out a backoff doubling from 0.5 s to 30 s, so an unreachable URL costs next to nothing
        self.backoff = 0.0
        self.quiet_until = 0.0
        self.volume_mailbox = spec.storage == "runpod_volume"

    def now(self) -> str:
        return utc(self.model.clock.now())

    def print(self, line: str) -> None:
        """One stdout line of the container."""
        self.model.append_log(self.pod.id, "container", line)

    def report(self, type_: str, **fields: Any) -> dict[str, Any]:
        self.seq += 1
        body = {"boot": self.boot, "seq": self.seq, "time": self.now(), "type": type_, **fields}
        self.print(format_report_line(body))
        return body

    # ---- the reports ------------------------------------------------------------------------

    def logs(self, *texts: str) -> None:
        reports = [self.report("log", text=t) for t in texts]
        if not reports:
            return
        chunk = "".join(dumps(r) + "\n" for r in reports).encode()
        self._mailbox_log_chunk(reports[0]["seq"], chunk)
        lines = [{k: r[k] for k in ("time", "text", "boot", "seq")} for r in reports]
        batch = str(uuid.uuid5(_BATCH_NAMESPACE, f"{self.boot}:{reports[0]['seq']}:{len(lines)}"))
        self.post("logs", {"lines": lines, "batch": batch})

    def progress(self, phase: str, step: int, total: int, loss: float | None = None) -> None:
        body = self.report(
            "progress",
            phase=phase,
            step=step,
            total_steps=total,
            loss=loss,
            learning_rate=2e-4 if phase == "training" else None,
            tokens_per_s=1234.5 if phase == "training" else None,
        )
        self.progress_body = body
        self.heartbeat()
        self.post("progress", body)

    def heartbeat(self) -> None:
        if self.progress_body is None:
            return
        status = {
            **self.progress_body,
            "run_id": self.spec.run_id,
            "updated_at": self.now(),
            "last_activity_at": self.now(),
            "attempt": self.attempt,
            "pod_id": self.pod.id,
        }
        self._mailbox_put("status.json", self.spec.status_url, dumps(status).encode())

    def final(self, type_: str, **fields: Any) -> None:
        body = self.report(type_, **fields)
        self.post(type_, body)
        self._mailbox_put("result.json", self.spec.result_url, dumps(body).encode())

    # ---- the mailbox -------------------------------------------------------------------------

    def _run_path(self, name: str) -> Path:
        return self.workspace.joinpath("runs", *_safe_key(self.spec.run_id), *_safe_key(name))

    def _mailbox_put(self, name: str, url: str | None, data: bytes) -> None:
        try:
            if self.volume_mailbox and self.spec.run_id:
                write_atomically(self._run_path(name), data)
            elif url:
                requests.put(url, data=data, timeout=10).raise_for_status()
        except (OSError, ValueError, requests.RequestException) as exc:
            log.warning("sandbox trainer: mailbox %s not written: %s", name, exc)

    def _mailbox_log_chunk(self, first_seq: int, data: bytes) -> None:
        if self.volume_mailbox:
            self._mailbox_put(f"logs/{self.boot}-{first_seq:08d}.jsonl", None, data)
            return
        pool = self.spec.log_urls
        if not pool:
            return
        index = min(self.pool_next, len(pool) - 1)
        self.pool_next += 1
        self._mailbox_put("logs", pool[index], data)

    def has_result(self) -> bool:
        return self.volume_mailbox and self._run_path("result.json").exists()

    # ---- callbacks ---------------------------------------------------------------------------

    def post(self, what: str, body: dict[str, Any], attempts: int = 3) -> bool:
        """POST a callback; failures are retried a few times, then dropped quietly."""
        if not self.url or time.monotonic() < self.quiet_until:
            return False
        for attempt in range(attempts):
            try:
                answer = self.session.post(
                    f"{self.url}/{what}", json=body, headers=self.headers, timeout=5
                )
                if answer.status_code < 500 and answer.status_code != 429:
                    self.backoff = 0.0
                    return answer.status_code < 400
            except requests.RequestException:
                pass
            threading.Event().wait(0.02 * (attempt + 1))
        self.backoff = min(30.0, max(0.5, self.backoff * 2))
        self.quiet_until = time.monotonic() + self.backoff
        return False


class Trainer:
    """Starts the container thread when a trainer Pod is created or resumed; Stop ends it."""

    def __init__(
        self, model: SandboxModel, base_url: str, step_seconds: float = 0.08, chatter: int = 0
    ) -> None:
        self.model = model
        self.base_url = base_url
        self.step_seconds = step_seconds
        self.chatter = chatter  # plain lines per step, as a progress bar prints them
        self.threads: list[threading.Thread] = []

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
            if pod.never_starts:
                self._never_starts(pod)
            else:
                self._run(pod)
        except Exception:  # the container dying must never take the sandbox down
            log.exception("sandbox trainer for pod %s failed", pod.id)

    def _never_starts(self, pod: Pod) -> None:
        """image_pull_fails / cuda_mismatch: RunPod retries, and its log repeats why, until the
        Pod is stopped or terminated; the container never runs, so nothing ever reports."""
        line = self.model.boot_failure_line(pod)
        stop = pod.stop_event
        while line is not None and not stop.wait(1.0) and pod.desired_status == RUNNING:
            self.model.append_log(pod.id, "system", line)

    def _run(self, pod: Pod) -> None:
        stop = pod.stop_event
        while not self.model.runtime_ready(pod):
            if stop.wait(0.02) or pod.desired_status != RUNNING:
                return
        workspace = self.model.pod_workspace(pod)
        env = {**pod.env, "RUNPOD_POD_ID": pod.id}  # RunPod sets it in every Pod
        spec = RunSpec(env, workspace, pod.volume_mount_path)
        out = Channels(self.model, pod, spec, workspace)
        scenario = pod.scenario or "success"
        out.print(f"tensorant trainer (sandbox simulation) starting, scenario={scenario}")
        if scenario == "crash":  # dies at import: a traceback on stdout, no report anywhere
            out.print("Traceback (most recent call last):")
            out.print('  File "/app/trainer/main.py", line 1, in <module>')
            out.print("RuntimeError: CUDA error: an illegal memory access was encountered")
            stop.wait(self.step_seconds)
            self.model.container_exited(pod.id)
            return
        with self.model.lock:
            resumed, pod.trainer_ran = pod.trainer_ran, True
        if resumed and out.has_result():
            out.print("tensorant trainer: result.json exists; idling")
            return
        out.logs(
            f"tensorant trainer starting (scenario={scenario})",
            f"pod {pod.id} on {pod.gpu_display_name} in {pod.datacenter_id}",
            f"loading base model {spec.base_model} and dataset",
        )
        out.progress("loading", 0, TOTAL_STEPS)
        # silent_after_start: two steps, then a hang where nothing prints (silent everywhere)
        steps = 2 if scenario == "silent_after_start" else TOTAL_STEPS
        for step in range(1, steps + 1):
            for i in range(1, self.chatter + 1):
                if stop.wait(self.step_seconds / (self.chatter + 1)):
                    return
                out.print(f"step {step}: micro-batch {i}/{self.chatter}")
            if stop.wait(self.step_seconds / (self.chatter + 1)):
                return
            loss = round(2.0 / step, 4)
            out.progress("training", step, TOTAL_STEPS, loss=loss)
            out.logs(f"step {step}/{TOTAL_STEPS} loss={loss:.4f}")
        if scenario in ("hang", "silent_after_start"):  # the heartbeat stops
            while not stop.wait(0.25):
                if scenario == "hang":  # only plain lines reach stdout
                    out.print("waiting on NCCL barrier ...")
            return
        self._export(pod, spec, out, scenario, workspace)

    def _export(
        self, pod: Pod, spec: RunSpec, out: Channels, scenario: str, workspace: Path
    ) -> None:
        out.progress("exporting", TOTAL_STEPS, TOTAL_STEPS)
        data = build_adapter_zip(
            spec.run_id or pod.id,
            spec.base_model,
            arch=spec.arch,
            r=spec.r,
            lora_alpha=spec.alpha,
            targets=spec.targets,
            # the real trainer's record (trainer/run.py), with the figures this one reported
            metrics={
                "partial": False,
                "step": TOTAL_STEPS,
                "last_loss": 2.0 / TOTAL_STEPS,
                "tokens_per_s": 1234.5,
                "training_seconds": float(TOTAL_STEPS),
            },
        )
        if scenario == "corrupt_adapter":
            data = b"this is not a zip file, the export was truncated\x00" + data[:32]
        with self.model.lock:
            pod.files[POD_ADAPTER_PATH] = data
        key = spec.adapter_key
        try:
            write_atomically(workspace.joinpath(*_safe_key(RECOVERY_KEY)), data)
            if spec.storage == "runpod_volume":
                if pod.network_volume_id:
                    write_atomically(workspace.joinpath(*_safe_key(key)), data)
            elif spec.upload_url and scenario != "export_fails":
                requests.put(spec.upload_url, data=data, timeout=10).raise_for_status()
            if scenario == "export_fails":
                raise RuntimeError("could not merge adapter weights")
        except Exception as exc:
            out.logs(f"export failed: {exc}")
            out.final(
                "failed",
                reason="export_failed",
                detail=f"adapter written to /{POD_ADAPTER_PATH} but export failed: {exc}"[:500],
            )
            return
        out.logs(f"adapter exported to {key} ({len(data)} bytes)")
        out.final(
            "exported",
            object_key=key,
            sha256=hashlib.sha256(data).hexdigest(),
            size_bytes=len(data),
            partial=False,
        )
