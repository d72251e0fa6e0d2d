"""Fixtures for the trainer (T1), registered once for the whole suite (tests/conftest.py), so
the trainer's tests and the adapter verifier's share one tiny model and one trained run. They
run without the control plane: one tiny model per session, a
workspace folder standing in for the volume, and a local HTTP stub for the callbacks."""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from trainer.protocol import (
    AdapterSpec,
    BaseModelSpec,
    DatasetSpec,
    Hyperparameters,
    Manifest,
    Report,
    TrialCaps,
    adapter_key,
    parse_report_line,
    volume_manifest_url,
)
from trainer.settings import Settings, Tunables

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TOKEN = "run-token-3b1f9c0d2e7a"
TINY = "models/tiny"
# 24 steps of 2 micro-batches of 4 rows: the loss falls well within them at this rate.
HYPERPARAMETERS = Hyperparameters(
    lora_r=8,
    lora_alpha=16,
    lora_dropout=0.05,
    learning_rate=5e-3,
    batch_size=4,
    gradient_accumulation=2,
    max_steps=24,
    max_seq_len=128,
    seed=7,
)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from trainer.tiny import build_tiny_model, demo_rows, rows_text

    rows = demo_rows(48) + demo_rows(16, fmt="prompt_completion")
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", rows_text(rows))


@dataclass
class Workspace:
    root: Path
    settings: Settings
    manifest: Manifest

    def path(self, key: str) -> Path:
        return self.root / key

    def with_tunables(self, **changes: Any) -> Settings:
        return replace(self.settings, tunables=replace(self.settings.tunables, **changes))


def make_workspace(
    root: Path,
    tiny_model: Path,
    *,
    run_id: str = "run-1",
    rows: list[dict[str, Any]] | None = None,
    fmt: str = "chat",
    hyperparameters: Hyperparameters = HYPERPARAMETERS,
    callback_url: str = "",
    tunables: Tunables | None = None,
) -> Workspace:
    from trainer.tiny import demo_rows, write_jsonl

    root.mkdir(parents=True, exist_ok=True)
    model = root / TINY
    if not model.exists():
        model.parent.mkdir(parents=True, exist_ok=True)
        model.symlink_to(tiny_model, target_is_directory=True)
    dataset = write_jsonl(rows or demo_rows(48, fmt=fmt), root / f"datasets/{run_id}.jsonl")
    manifest = Manifest(
        run_id=run_id,
        kind="trial",
        base_model=BaseModelSpec(source="storage", path=TINY),
        dataset=DatasetSpec(
            object_key=f"datasets/{run_id}.jsonl",
            sha256=hashlib.sha256(dataset.read_bytes()).hexdigest(),
            format=fmt,
        ),
        adapter=AdapterSpec(object_key=adapter_key(run_id)),
        hyperparameters=hyperparameters,
        trial=TrialCaps(max_rows=48, max_steps=hyperparameters.max_steps),
    )
    path = root / "runs" / run_id / "manifest.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(manifest.dumps())
    settings = Settings(
        run_id=run_id,
        token=TOKEN,
        callback_url=callback_url,
        manifest_url=volume_manifest_url(run_id),
        workspace=root,
        container_disk=root.parent / f"{root.name}-disk",
        tunables=tunables or Tunables(progress_s=0, heartbeat_s=30, log_flush_s=0.2),
    )
    return Workspace(root, settings, manifest)


@dataclass
class CallbackStub:
    """A local control plane stand-in that records what the trainer POSTs."""

    url: str
    requests: list[tuple[str, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    status: int = 202

    def bodies(self, suffix: str) -> list[dict[str, Any]]:
        return [body for path, _, body in self.requests if path.endswith(suffix)]


@pytest.fixture(scope="session")
def callback_stub() -> Iterator[CallbackStub]:
    stub = CallbackStub(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length))
            stub.requests.append((self.path, dict(self.headers), body))
            self.send_response(stub.status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield stub
    server.shutdown()


@dataclass
class TrainedRun:
    workspace: Workspace
    result: Any
    stdout: list[str]
    callbacks: list[tuple[str, dict[str, str], dict[str, Any]]]  # what the stub received
    seconds: float

    def callback_bodies(self, suffix: str) -> list[dict[str, Any]]:
        return [body for path, _, body in self.callbacks if path.endswith(suffix)]

    @property
    def reports(self) -> list[Report]:
        return [r for r in (parse_report_line(line) for line in self.stdout) if r is not None]


def run_in_process(workspace: Workspace, settings: Settings | None = None) -> tuple[Any, list[str]]:
    from trainer.run import run
    from trainer.stop import StopSignal

    out = io.StringIO()
    result = run(settings or workspace.settings, StopSignal(), out=out)
    assert result.reporter is not None
    result.reporter.close(callback_wait_s=1.0)
    return result, out.getvalue().splitlines()


@pytest.fixture(scope="session")
def trained_run(
    tmp_path_factory: pytest.TempPathFactory, tiny_model: Path, callback_stub: CallbackStub
) -> TrainedRun:
    """One complete trial on the tiny model, reporting to a mailbox folder, stdout and the stub."""
    import time

    ws = make_workspace(
        tmp_path_factory.mktemp("trained") / "workspace", tiny_model, callback_url=callback_stub.url
    )
    started = time.monotonic()
    first = len(callback_stub.requests)
    result, lines = run_in_process(ws)
    received = list(callback_stub.requests[first:])
    return TrainedRun(ws, result, lines, received, time.monotonic() - started)


@dataclass
class PodProcess:
    """The trainer started as the Pod starts it (the console script, env, a workspace folder),
    sent SIGTERM by its stdout reader once it reports training step 3 (mid-training)."""

    workspace: Workspace
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)
    sigterm_at: float | None = None
    exit_seconds: float | None = None  # from SIGTERM to exit
    code: int | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)
            report = parse_report_line(line)
            training = getattr(report, "phase", None) == "training"
            if self.sigterm_at is None and training and getattr(report, "step", 0) >= 3:
                self.proc.send_signal(signal.SIGTERM)
                self.sigterm_at = time.monotonic()
        self.code = self.proc.wait()
        if self.sigterm_at is not None:
            self.exit_seconds = time.monotonic() - self.sigterm_at
        self.done.set()


@pytest.fixture(scope="session")
def pod_process(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[PodProcess]:
    ws = make_workspace(
        tmp_path_factory.mktemp("pod") / "workspace",
        tiny_model,
        hyperparameters=replace(HYPERPARAMETERS, max_steps=100_000),
    )
    env = {
        **os.environ,
        "TENSORANT_RUN_ID": ws.settings.run_id,
        "TENSORANT_RUN_TOKEN": TOKEN,
        "TENSORANT_CALLBACK_URL": "",
        "TENSORANT_MANIFEST": ws.settings.manifest_url,
        "TENSORANT_WORKSPACE": str(ws.root),
        "TENSORANT_CONTAINER_DISK": str(ws.settings.container_disk),
        "TENSORANT_PROGRESS_SECONDS": "0",
    }
    script = Path(sys.executable).with_name("tensorant-trainer")
    proc = subprocess.Popen(
        [str(script)],
        env=env,
        cwd=ws.root.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    pod = PodProcess(ws, proc)
    threading.Thread(target=pod.read, daemon=True).start()
    yield pod
    if proc.poll() is None:
        proc.kill()
        proc.wait()
