"""Chaos fixtures: a private sandbox (real-time clock, its own faults), the PostgreSQL +
RabbitMQ stack whose workers are `tensorant worker` subprocesses killed with SIGKILL, and helpers
to drive runs over HTTP and to check the cleanup invariants against the sandbox's own Pod list."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from adapters.vault import new_master_key_text
from entrypoints.server import serve_with_sandbox
from entrypoints.settings import Settings
from runpod_sandbox import Sandbox
from tests.conftest import fresh_queue, require_service
from tests.e2e.conftest import Api, Org, _drop, _pg_schema

T = TypeVar("T")
AMQP = "amqp://guest:guest@127.0.0.1:5672/%2F"

SETTLED = ("succeeded", "failed", "cancelled", "needs_recovery")


@pytest.fixture(scope="module")
def box() -> Iterator[Sandbox]:
    """Never advance this clock: workers in other processes use the system clock."""
    with Sandbox(startup_seconds=0.1) as sb:
        yield sb


def with_retries(call: Any, *, ok: tuple[int, ...], attempts: int = 15) -> httpx.Response:
    """Repeat a request the provider's faults made fail (503 provider-unavailable and the like)."""
    response: httpx.Response = call()
    for _ in range(attempts):
        if response.status_code in ok or response.status_code < 500:
            return response
        time.sleep(0.2)
        response = call()
    return response


def all_pods(box: Sandbox) -> list[dict[str, Any]]:
    answer = httpx.get(f"{box.base_url}/_sandbox/pods", timeout=30)
    pods: list[dict[str, Any]] = answer.json()["pods"]
    return pods


def uncovered_pods(box: Sandbox, orgs: list[Org]) -> list[dict[str, Any]]:
    """Pods billing at RunPod (not TERMINATED) that no organization's /v1/cleanup lists."""
    listed = {i["pod_id"] for o in orgs for i in o.member.get("/v1/cleanup").json()["items"]}
    return [p for p in all_pods(box) if p["status"] != "TERMINATED" and p["id"] not in listed]


def wait_until_covered(box: Sandbox, orgs: list[Org], timeout: float = 15) -> list[dict[str, Any]]:
    """The views and the reconciler are eventually consistent: allow them a bounded moment."""
    deadline = time.monotonic() + timeout
    missing = uncovered_pods(box, orgs)
    while missing and time.monotonic() < deadline:
        time.sleep(0.3)
        missing = uncovered_pods(box, orgs)
    return missing


def states(org: Org, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    return {rid: org.member.get(f"/v1/runs/{rid}").json() for rid in run_ids}


def wait_settled(org: Org, run_ids: list[str], timeout: float) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    docs = states(org, run_ids)
    while time.monotonic() < deadline:
        if all(d["state"] in SETTLED for d in docs.values()):
            return docs
        time.sleep(0.5)
        docs = states(org, run_ids)
    return docs


@pytest.fixture(scope="module")
def crash_settings() -> dict[str, Any]:
    """Settings a module adds to its crash stack (server and workers), as TENSORANT_* names."""
    return {}


@pytest.fixture(scope="module")
def crash_stack(
    box: Sandbox,
    postgres_url: str,
    tmp_path_factory: pytest.TempPathFactory,
    crash_settings: dict[str, Any],
) -> Iterator[tuple[Api, dict[str, str]]]:
    require_service("RabbitMQ", "127.0.0.1", 5672)
    schema = _pg_schema(postgres_url)
    data_dir: Path = tmp_path_factory.mktemp("crash")
    master = new_master_key_text()
    db = f"{postgres_url}?schema={schema}"
    queues = ExitStack()
    queue = queues.enter_context(fresh_queue(AMQP))
    settings = Settings(
        data_dir=data_dir,
        database_url=db,
        broker_url=AMQP,
        queue_name=queue,
        master_key=master,
        reconcile_interval=0.5,
        projection_poll_interval=0.2,
        termination_backoff_seconds=0.2,
        **{k.lower(): v for k, v in crash_settings.items()},
    )
    # The relay (and its reconcile ticker) runs here; the workers are the subprocesses that
    # the tests kill.
    server, container = serve_with_sandbox(
        settings, box, reactions={"worker": False, "relay": True}
    )
    creds = box.credentials()
    env = {
        **os.environ,
        "TENSORANT_DATABASE_URL": db,
        "TENSORANT_BROKER_URL": AMQP,
        "TENSORANT_QUEUE_NAME": queue,
        "TENSORANT_RUNPOD_API_BASE_URL": box.base_url,
        "TENSORANT_RUNPOD_S3_ENDPOINT_TEMPLATE": creds["s3_endpoint_template"],
        "TENSORANT_S3_ALLOW_ENDPOINTS": creds["s3_endpoint_template"].split("{dc}")[0],
        "TENSORANT_MASTER_KEY": master,
        "TENSORANT_PUBLIC_URL": server.base_url,
        "TENSORANT_DATA_DIR": str(data_dir),
        "TENSORANT_TERMINATION_BACKOFF_SECONDS": "0.2",
        "TENSORANT_LOG_LEVEL": "INFO",
        **{f"TENSORANT_{k.upper()}": str(v) for k, v in crash_settings.items()},
    }
    api = Api(
        "postgres-rabbitmq-crash", server.base_url, container, box, settings, (postgres_url, schema)
    )
    try:
        yield api, env
    finally:
        api.close()
        server.stop()
        _drop(postgres_url, schema)
        queues.close()


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 60) -> T:
    """`probe()` once it is truthy, polled every 0.1 s; a failure naming `what` at `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


class Workers:
    """`tensorant worker` subprocesses; each is killed with SIGKILL and restarted at once."""

    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env, self.log_dir = env, log_dir
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []
        self.ready: dict[int, float] = {}
        self.kills = 0
        self.started = 0

    def spawn(self) -> None:
        path = self.log_dir / f"worker-{self.started}.log"
        log = path.open("wb")
        proc = subprocess.Popen(
            [sys.executable, "-c", "from entrypoints.cli import main; main()", "worker"],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.started += 1
        self.procs.append((proc, path))

    def oldest_due(self, rng: random.Random) -> bool:
        """The oldest worker is due 0.5-2 s after it started consuming, or at most 5 s after its
        start (a start slowed by CPU contention is killed mid-start: also a crash point)."""
        proc, path = self.procs[0]
        if proc.pid not in self.ready:
            self.ready[proc.pid] = time.monotonic() + 5.0
        if b"worker consuming" in path.read_bytes():
            self.ready[proc.pid] = min(
                self.ready[proc.pid], time.monotonic() + rng.uniform(0.5, 2.0)
            )
        return time.monotonic() >= self.ready[proc.pid]

    def logs(self) -> str:
        """Every worker's output so far, oldest first."""
        return "".join(
            p.read_bytes().decode(errors="replace")
            for p in sorted(self.log_dir.glob("worker-*.log"))
        )

    def kill_oldest(self) -> None:
        proc, _ = self.procs.pop(0)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.kills += 1
        self.spawn()

    def stop_all(self) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        self.procs.clear()
