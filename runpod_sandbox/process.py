"""The real trainer as a Pod's container: one child process per running trainer Pod.

The Pod's start command (`dockerArgs` / `args`: the public image's boot), else `python -m
trainer` (a baked image), or any command given, runs with the Pod's env plus what stands in for the
container: TENSORANT_WORKSPACE (the folder mounted at the Pod's /workspace: the network volume's
folder, which the sandbox's S3 API serves, or the Pod's own volume disk), TENSORANT_CONTAINER_DISK
(a per-Pod folder, wiped when the Pod stops and deleted when it is terminated) and RUNPOD_POD_ID.
Its stdout and stderr, line by line, are the Pod's container log (GET /v2/pods/{id}/logs).

Stop sends SIGTERM, then SIGKILL after the grace period; the volume is kept and resume starts the
process again. Terminate kills it at once. A process that exits by itself stops the Pod, as the
simulated `crash` does. The inherited environment loses every TENSORANT_* and RUNPOD_* variable
first: the control plane's settings and secrets never reach a Pod.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from .model import RUNNING, Pod, SandboxModel

log = logging.getLogger(__name__)
DEFAULT_COMMAND = (sys.executable, "-m", "trainer")
_PRIVATE_PREFIXES = ("TENSORANT_", "RUNPOD_")


@dataclass
class _Container:
    pod_id: str
    process: subprocess.Popen[bytes]
    reader: threading.Thread
    stopping: bool = False
    exited: threading.Event = field(default_factory=threading.Event)


class ProcessRunner:
    """Starts, stops and kills the trainer process of each trainer Pod."""

    def __init__(
        self,
        model: SandboxModel,
        *,
        command: Sequence[str] | None = None,
        stop_grace_seconds: float = 5.0,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.model = model
        # A given command replaces every Pod's; else a Pod's start command runs (the public
        # image's boot: bundle, cached environment, `python -m trainer`), else the baked image's
        # `python -m trainer`.
        self.command = list(command) if command is not None else None
        self.stop_grace_seconds = stop_grace_seconds
        self.extra_env = dict(extra_env or {})
        self._containers: dict[str, _Container] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    # ---- hooks (called by the model, some under its lock: never block) ----------------------

    def launch(self, pod: Pod) -> None:
        """The Pod was created or resumed: start its process once its runtime is up."""
        self._spawn(self._start_when_ready, pod, f"start-{pod.id}")

    def stop(self, pod: Pod) -> None:
        self._spawn(self._stop, pod, f"stop-{pod.id}", True)

    def kill(self, pod: Pod) -> None:
        self._spawn(self._stop, pod, f"kill-{pod.id}", False)

    def _spawn(self, target: object, pod: Pod, name: str, *args: object) -> None:
        thread = threading.Thread(
            target=target,  # type: ignore[arg-type]
            args=(pod, *args),
            daemon=True,
            name=f"sandbox-{name}",
        )
        self._threads.append(thread)
        thread.start()

    # ---- the container ------------------------------------------------------------------------

    def command_for(self, pod: Pod) -> list[str]:
        if self.command is not None:
            return self.command
        if pod.docker_args:
            return shlex.split(pod.docker_args)
        return list(DEFAULT_COMMAND)

    def env_for(self, pod: Pod) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(_PRIVATE_PREFIXES)}
        base.setdefault("PYTHONUNBUFFERED", "1")
        # The image's `python3` is this project's environment (torch and the rest installed),
        # as a public PyTorch image's is its own: the Pod's boot reuses what it finds there.
        bin_dir = os.path.dirname(sys.executable)
        base["PATH"] = os.pathsep.join([bin_dir, base.get("PATH", os.defpath)])
        return {
            **base,
            **self.extra_env,
            **pod.env,
            "RUNPOD_POD_ID": pod.id,
            "TENSORANT_WORKSPACE": str(self.model.pod_workspace(pod)),
            "TENSORANT_CONTAINER_DISK": str(self.model.pod_container_disk(pod)),
        }

    def _start_when_ready(self, pod: Pod) -> None:
        stop = pod.stop_event
        while not self.model.runtime_ready(pod):
            if stop.wait(0.02) or pod.desired_status != RUNNING:
                return
        with self._lock:
            current = self._containers.get(pod.id)
            if current is not None and current.process.poll() is None:
                # Resumed within the stop grace: the old process ends first, as on RunPod.
                current.exited.wait(self.stop_grace_seconds + 6)
            env = self.env_for(pod)
            disk = self.model.pod_container_disk(pod)
            try:
                process = subprocess.Popen(  # noqa: S603 - our own command, no shell
                    self.command_for(pod),
                    env=env,
                    cwd=disk,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            except OSError as exc:
                self.model.append_log(pod.id, "system", f"container failed to start: {exc}")
                self.model.container_exited(pod.id)
                return
            with self.model.lock:
                pod.container_alive = True
                pod.container_pid = process.pid
            reader = threading.Thread(
                target=self._read, args=(pod,), daemon=True, name=f"sandbox-stdout-{pod.id}"
            )
            container = _Container(pod.id, process, reader)
            self._containers[pod.id] = container
            reader.start()
        log.info("sandbox pod %s: trainer process %d started", pod.id, process.pid)

    def _read(self, pod: Pod) -> None:
        container = self._containers[pod.id]
        stream = container.process.stdout
        assert stream is not None
        for raw in iter(stream.readline, b""):
            self.model.append_log(
                pod.id, "container", raw.decode("utf-8", "replace").rstrip("\r\n")
            )
        code = container.process.wait()
        container.exited.set()
        self.model.append_log(pod.id, "system", f"container exited with code {code}")
        with self.model.lock:
            pod.container_alive = False
            by_itself = not container.stopping and pod.desired_status == RUNNING
            if pod.desired_status != RUNNING:
                self.model.wipe_container_disk(pod)  # a stopped Pod's container disk is gone
        if by_itself:
            self.model.container_exited(pod.id)

    def _stop(self, pod: Pod, graceful: bool) -> None:
        with self._lock:
            container = self._containers.get(pod.id)
        if container is None or container.process.poll() is not None:
            return
        container.stopping = True
        process = container.process
        if graceful:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)  # to the container's PID 1, as Docker does
            if container.exited.wait(self.stop_grace_seconds):
                return
            self.model.append_log(
                pod.id, "system", f"container did not stop within {self.stop_grace_seconds:g}s"
            )
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        container.exited.wait(5)
        if not graceful:
            self.model.delete_pod_disks(pod)

    def alive(self, pod_id: str) -> bool:
        with self._lock:
            container = self._containers.get(pod_id)
        return container is not None and container.process.poll() is None

    def pid(self, pod_id: str) -> int | None:
        with self._lock:
            container = self._containers.get(pod_id)
        return container.process.pid if container else None

    def stop_all(self, timeout: float = 2.0) -> None:
        """Kill every process (the sandbox is shutting down)."""
        with self._lock:
            containers = list(self._containers.values())
        for c in containers:
            if c.process.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(c.process.pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        for c in containers:
            with contextlib.suppress(subprocess.TimeoutExpired):
                c.process.wait(max(0.0, deadline - time.monotonic()))
            c.reader.join(max(0.0, deadline - time.monotonic()))
