"""The RunPod sandbox: a local RunPod that the real runpod SDK and boto3 talk to over loopback.

with Sandbox() as sb:
    os.environ["RUNPOD_API_BASE_URL"] = sb.base_url
    runpod.api_key = sb.credentials()["api_key"]

Disks are folders under `data_dir` (a temporary folder removed at stop unless one is given):
`volumes/<volume id>/` is a network volume, the same storage its S3 bucket serves (a file a Pod
writes under /workspace is an object at the same key, and the other way round);
`pods/<pod id>/container/` is a Pod's container disk (wiped on stop, deleted on terminate) and
`pods/<pod id>/volume/` its volume disk when it has no network volume. Trainer Pods (image
`tensorant/trainer*`, or a run's Pod on a public image with a start command) run the simulated
trainer (a thread, default) or, with `Sandbox(trainer="real")` or TENSORANT_SANDBOX_TRAINER=real,
a child process (runpod_sandbox.process): the Pod's start command (the public image's boot: the
trainer bundle fetched, its environment installed on the volume once, `python -m trainer`), with
this project's environment standing in for the image's Python, or a baked image's
`python -m trainer`; both speak the trainer's contract (report lines on stdout = the Pod's log,
the mailbox under runs/<id>/, callbacks).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import uvicorn

from . import seed
from .app import build_app
from .clock import SandboxClock
from .faults import Faults
from .hub import Hub
from .model import Pod, SandboxModel
from .process import ProcessRunner
from .seed import seeded_credentials
from .trainer import Trainer

log = logging.getLogger(__name__)
ENV_CLOCK_URL = "TENSORANT_CLOCK_URL"  # the trainer's contract (trainer/protocol/layout.py)

try:  # the S3 front is optional so the rest of the sandbox works without moto
    from .s3 import SandboxS3
except ImportError:  # pragma: no cover - only when moto is missing
    SandboxS3 = None  # type: ignore[assignment,misc]

__all__ = [
    "Faults",
    "Hub",
    "Sandbox",
    "SandboxClock",
    "SandboxModel",
    "seeded_credentials",
    "serve",
]


class Sandbox:
    """Serves the sandbox with uvicorn in a daemon thread; `.model` holds every admin knob."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        startup_seconds: float = 0.3,
        clock: SandboxClock | None = None,
        data_dir: str | Path | None = None,
        trainer: str | None = None,
        trainer_command: Sequence[str] | None = None,
        stop_grace_seconds: float = 5.0,
        trainer_env: dict[str, str] | None = None,
        trainer_step_seconds: float = 0.08,
        trainer_chatter: int = 0,
    ) -> None:
        """`trainer`: "simulated" (default; a thread that speaks the contract in under a second)
        or "real" (the Pod's start command, else `python -m trainer`, as a child process per
        trainer Pod; scenarios other than success stay simulated); default from
        TENSORANT_SANDBOX_TRAINER. `trainer_command` replaces every Pod's command;
        `stop_grace_seconds` is the SIGTERM-to-SIGKILL grace of a stop; `trainer_env` is added
        to every real trainer's env (e.g. tunables). The simulated trainer takes
        `trainer_step_seconds` per step and prints `trainer_chatter` plain lines (as a progress
        bar would) per step."""
        self.host = host
        self.requested_port = port
        self.clock = clock or SandboxClock()
        # Network volumes, container disks and Pod volume disks are folders under data_dir
        # (a temporary folder, removed at stop, unless one is given).
        self._owned_dir = data_dir is None
        self.data_dir = Path(data_dir or tempfile.mkdtemp(prefix="runpod-sandbox-")).absolute()
        self.model = SandboxModel(
            self.clock, startup_seconds=startup_seconds, data_dir=self.data_dir
        )
        self.trainer_mode = trainer or os.environ.get("TENSORANT_SANDBOX_TRAINER") or "simulated"
        if self.trainer_mode not in ("simulated", "real"):
            raise ValueError("trainer must be 'simulated' or 'real'")
        self.runner = ProcessRunner(
            self.model,
            command=trainer_command,
            stop_grace_seconds=stop_grace_seconds,
            extra_env=trainer_env,
        )
        self._real_pods: set[str] = set()
        self.s3: Any = None
        self.hub = Hub()  # the Hugging Face Hub's stand-in, served under /hf
        self.port: int | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._trainer: Trainer | None = None
        self._trainer_step_seconds = trainer_step_seconds
        self._trainer_chatter = trainer_chatter

    @property
    def base_url(self) -> str:
        """What RUNPOD_API_BASE_URL takes (no trailing slash)."""
        if self.port is None:
            raise RuntimeError("the sandbox is not started")
        return f"http://{self.host}:{self.port}"

    def credentials(self) -> dict[str, Any]:
        return seeded_credentials(self.port or self.requested_port or 8181, self.host)

    def start(self) -> Sandbox:
        # Binding the socket ourselves gives the real port before uvicorn runs (port=0 works).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.requested_port))
        self.port = sock.getsockname()[1]
        mounts = []
        if SandboxS3 is not None:
            self.s3 = self._build_s3()
            mounts.append((seed.S3_MOUNT, self.s3.asgi_app()))
        self._trainer = Trainer(
            self.model,
            self.base_url,
            step_seconds=self._trainer_step_seconds,
            chatter=self._trainer_chatter,
        )
        # A real trainer judges its run's deadline on this clock, which tests move forward.
        self.runner.extra_env.setdefault(ENV_CLOCK_URL, f"{self.base_url}/_sandbox/clock")
        self.model.on_pod_created = self._pod_created
        self.model.on_pod_lifecycle = self._pod_lifecycle
        app = build_app(self.model, self.credentials(), mounts, self.hub)
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            daemon=True,
            name=f"sandbox-{self.port}",
        )
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the sandbox server did not start")
            time.sleep(0.002)
        return self

    def _build_s3(self) -> Any:
        s3 = SandboxS3(seed.S3_ACCESS_KEY_ID, seed.S3_SECRET_ACCESS_KEY, base_url=self.base_url)
        volume_buckets = set()
        for volume in self.model.volumes.values():
            if volume.s3_api:
                s3.attach_folder(volume.id, volume.datacenter_id, self.model.volume_dir(volume.id))
                volume_buckets.add(volume.id)
        s3.resolver = self._volume_bucket
        # The RunPod S3 key reaches the volumes only (those made later through REST v2 too, as
        # RunPod's does); the custom key reaches its bucket only.
        s3.add_credentials(
            seed.S3_ACCESS_KEY_ID, seed.S3_SECRET_ACCESS_KEY, volume_buckets, volumes=True
        )
        s3.create_bucket(seed.CUSTOM_S3_BUCKET, seed.CUSTOM_S3_REGION)
        s3.add_credentials(
            seed.CUSTOM_S3_ACCESS_KEY_ID, seed.CUSTOM_S3_SECRET_ACCESS_KEY, {seed.CUSTOM_S3_BUCKET}
        )
        return s3

    def _volume_bucket(self, bucket: str) -> tuple[str, Path] | None:
        """A volume created after start (REST v2) gets its folder-backed bucket on first use."""
        volume = self.model.volumes.get(bucket)
        if volume is None or not volume.s3_api:
            return None
        return volume.datacenter_id, self.model.volume_dir(volume.id)

    def _pod_created(self, pod: Pod) -> None:
        if self.trainer_mode == "real" and (pod.scenario or "success") == "success":
            self._real_pods.add(pod.id)
            self.runner.launch(pod)
        elif self._trainer is not None:
            self._trainer.launch(pod)

    def _pod_lifecycle(self, pod: Pod, what: str) -> None:
        """Called under the model's lock: stop ends the container (SIGTERM, grace, SIGKILL for a
        real one) and wipes its disk, terminate deletes the Pod's disks (network volumes live
        on), resume starts the trainer again."""
        real = pod.id in self._real_pods
        if what == "stopped":
            if real:
                self.runner.stop(pod)
            else:
                self.model.wipe_container_disk(pod)
        elif what == "terminated":
            if real:
                self.runner.kill(pod)
            else:
                self.model.delete_pod_disks(pod)
        elif what == "resumed" and pod.is_trainer:
            if real:
                self.runner.launch(pod)
            elif self._trainer is not None:
                self._trainer.launch(pod)

    def volume_path(self, volume_id: str) -> Path:
        """The folder that is the network volume (a Pod's /workspace; S3 serves it too)."""
        return self.model.volume_dir(volume_id)

    def read_volume_file(self, volume_id: str, key: str) -> bytes | None:
        """A file on a network volume (test helper; any datacenter)."""
        parts = [p for p in key.split("/") if p]
        if not parts or ".." in parts:
            return None
        path = self.model.volume_dir(volume_id).joinpath(*parts)
        return path.read_bytes() if path.is_file() else None

    def write_volume_file(self, volume_id: str, key: str, data: bytes) -> None:
        """Put a file on a network volume, as a Pod writing under /workspace would."""
        parts = [p for p in key.split("/") if p]
        if not parts or ".." in parts:
            raise ValueError(f"unsafe key {key!r}")
        path = self.model.volume_dir(volume_id).joinpath(*parts)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)

    def stop(self) -> None:
        self.model.release_held()  # no server thread stays blocked on a held create
        if self._trainer is not None:
            self._trainer.stop_all(timeout=0.5)
        self.runner.stop_all()
        if self.model.serverless is not None:
            self.model.serverless.stop_all()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(5)
        if self.s3 is not None:
            self.s3.close()
        self._server = self._thread = None
        if self._owned_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # Convenience pass-throughs so tests read naturally.
    def set_scenario(self, scenario: str, count: int = 1) -> None:
        self.model.set_scenario(scenario, count)

    def set_faults(self, faults: Faults | dict[str, Any] | None = None, **knobs: Any) -> Faults:
        return self.model.set_faults(faults, **knobs)

    def advance_clock(self, seconds: float) -> None:
        self.model.advance_clock(seconds)


def serve(host: str = "127.0.0.1", port: int = 8181) -> None:
    """Run the sandbox in the foreground until interrupted (`tensorant sandbox`)."""
    sandbox = Sandbox(host, port).start()
    print(f"RunPod sandbox on {sandbox.base_url} (GraphQL at /graphql)", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        sandbox.stop()
