"""The RunPod sandbox: a local RunPod that the real runpod SDK and boto3 talk to over loopback.

with Sandbox() as sb:
    os.environ["RUNPOD_API_BASE_URL"] = sb.base_url
    runpod.api_key = sb.credentials()["api_key"]
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn

from . import seed
from .app import build_app
from .clock import SandboxClock
from .faults import Faults
from .model import SandboxModel
from .seed import seeded_credentials
from .trainer import Trainer

log = logging.getLogger(__name__)

try:  # the S3 front is optional so the rest of the sandbox works without moto
    from .s3 import SandboxS3
except ImportError:  # pragma: no cover - only when moto is missing
    SandboxS3 = None  # type: ignore[assignment,misc]

__all__ = ["Faults", "Sandbox", "SandboxClock", "SandboxModel", "seeded_credentials", "serve"]


class Sandbox:
    """Serves the sandbox with uvicorn in a daemon thread; `.model` holds every admin knob."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        startup_seconds: float = 0.3,
        clock: SandboxClock | None = None,
    ) -> None:
        self.host = host
        self.requested_port = port
        self.clock = clock or SandboxClock()
        self.model = SandboxModel(self.clock, startup_seconds=startup_seconds)
        self.s3: Any = None
        self.port: int | None = None
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._trainer: Trainer | None = None

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
        self._trainer = Trainer(self.model, self.base_url)
        self._trainer.volume_writer = self._write_volume_in_process
        self.model.on_pod_created = self._trainer.launch
        app = build_app(self.model, self.credentials(), mounts)
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
                s3.create_bucket(volume.id, volume.datacenter_id)
                volume_buckets.add(volume.id)
        # The RunPod S3 key reaches the volumes only; the custom key reaches its bucket only.
        s3.add_credentials(seed.S3_ACCESS_KEY_ID, seed.S3_SECRET_ACCESS_KEY, volume_buckets)
        s3.create_bucket(seed.CUSTOM_S3_BUCKET, seed.CUSTOM_S3_REGION)
        s3.add_credentials(
            seed.CUSTOM_S3_ACCESS_KEY_ID, seed.CUSTOM_S3_SECRET_ACCESS_KEY, {seed.CUSTOM_S3_BUCKET}
        )
        return s3

    def _write_volume_in_process(self, volume_id: str, key: str, data: bytes) -> None:
        """Volumes in datacenters without the S3 API still hold files; store them directly."""
        if self.s3 is not None:
            self.s3.create_bucket(volume_id, self.model.volumes[volume_id].datacenter_id)
            self.s3.put_object(volume_id, key, data)

    def read_volume_file(self, volume_id: str, key: str) -> bytes | None:
        """A file on a network volume (test helper; any datacenter)."""
        return self.s3.get_object(volume_id, key) if self.s3 is not None else None

    def stop(self) -> None:
        self.model.release_held()  # no server thread stays blocked on a held create
        if self._trainer is not None:
            self._trainer.stop_all(timeout=0.5)
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(5)
        if self.s3 is not None:
            self.s3.close()
        self._server = self._thread = None

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
