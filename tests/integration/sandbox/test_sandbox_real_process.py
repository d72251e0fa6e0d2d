"""A trainer Pod's container as a real child process: the Pod's env plus the disk mapping, its
stdout/stderr as the Pod's log, stop = SIGTERM then SIGKILL after the grace with the volume kept,
resume = a new process, terminate = killed and the container disk deleted. A small stand-in
script keeps these fast; test_sandbox_real_trainer.py runs the real trainer."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from runpod_sandbox import Sandbox

VOLUME = "nv7eu1ro4k"
SCRIPT = """
import os, pathlib, signal, sys, time
ws = pathlib.Path(os.environ["TENSORANT_WORKSPACE"])
disk = pathlib.Path(os.environ["TENSORANT_CONTAINER_DISK"])
(disk / "scratch.bin").write_bytes(b"x" * 1000)
def term(*_):
    print("got SIGTERM", flush=True)
    if os.environ.get("MODE") == "stubborn":
        return
    (ws / "saved-on-sigterm.txt").write_text(os.environ["RUNPOD_POD_ID"])
    sys.exit(0)
signal.signal(signal.SIGTERM, term)
print("started", os.getpid(), os.environ["TENSORANT_RUN_ID"], flush=True)
print("secret visible" if "TENSORANT_MASTER_KEY" in os.environ else "no secrets", flush=True)
print("a line on stderr", file=sys.stderr, flush=True)
while True:
    time.sleep(0.02)
"""


@pytest.fixture
def real(monkeypatch: pytest.MonkeyPatch) -> Iterator[Sandbox]:
    monkeypatch.setenv("TENSORANT_MASTER_KEY", "the-control-plane-secret")
    with Sandbox(
        startup_seconds=0.05,
        trainer="real",
        trainer_command=[sys.executable, "-c", SCRIPT],
        stop_grace_seconds=0.6,
    ) as sb:
        yield sb


@pytest.fixture
def api(real: Sandbox) -> Iterator[httpx.Client]:
    key = real.credentials()["api_key"]
    with httpx.Client(
        base_url=real.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=10
    ) as client:
        yield client


def launch(api: httpx.Client, mode: str = "polite") -> str:
    body: dict[str, Any] = {
        "name": f"proc-{mode}",
        "image": "tensorant/trainer:1.0",
        "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1},
        "dataCenterIds": ["EU-RO-1"],
        "env": {"TENSORANT_RUN_ID": f"run-{mode}", "MODE": mode},
        "mounts": {"network": [{"volumeId": VOLUME, "path": "/workspace"}]},
    }
    answer = api.post("/v2/pods", json=body)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def lines(sandbox: Sandbox, pod_id: str, source: str = "container") -> list[str]:
    return [e[3] for e in list(sandbox.model.pod_logs.get(pod_id, [])) if e[2] == source]


def until(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)
    return value


def test_stop_sends_sigterm_keeps_the_volume_wipes_the_container_disk_and_resume_restarts(
    real: Sandbox, api: httpx.Client
) -> None:
    pod_id = launch(api)
    until(lambda: "a line on stderr" in lines(real, pod_id))
    out = lines(real, pod_id)
    assert out[0] == f"started {real.runner.pid(pod_id)} run-polite"
    assert "no secrets" in out
    disk = real.data_dir / "pods" / pod_id / "container"
    assert (disk / "scratch.bin").exists()
    first_pid = real.runner.pid(pod_id)

    assert api.post(f"/v2/pods/{pod_id}/action", json={"action": "stop"}).status_code == 200
    until(lambda: not real.runner.alive(pod_id))
    # the exit line is written by the stdout reader once it sees the end of the stream, which can
    # be a moment after the process is gone
    until(lambda: any(x.startswith("container exited") for x in lines(real, pod_id, "system")))
    assert "got SIGTERM" in lines(real, pod_id)
    assert real.read_volume_file(VOLUME, "saved-on-sigterm.txt") == pod_id.encode()
    assert "container exited with code 0" in lines(real, pod_id, "system")
    until(lambda: not disk.exists())  # a stopped Pod's container disk is gone; the volume is not

    assert api.post(f"/v2/pods/{pod_id}/action", json={"action": "start"}).status_code == 200
    until(lambda: real.runner.alive(pod_id) and real.runner.pid(pod_id) != first_pid)
    until(lambda: sum(x.startswith("started ") for x in lines(real, pod_id)) == 2)

    assert api.delete(f"/v2/pods/{pod_id}").status_code == 204
    until(lambda: not real.runner.alive(pod_id))
    until(lambda: not (real.data_dir / "pods" / pod_id).exists())
    assert real.read_volume_file(VOLUME, "saved-on-sigterm.txt") == pod_id.encode()


def test_a_process_that_ignores_sigterm_is_killed_after_the_grace_period(
    real: Sandbox, api: httpx.Client
) -> None:
    pod_id = launch(api, "stubborn")
    until(lambda: "a line on stderr" in lines(real, pod_id))
    started = time.monotonic()
    api.post(f"/v2/pods/{pod_id}/action", json={"action": "stop"})
    until(lambda: not real.runner.alive(pod_id))
    took = time.monotonic() - started
    assert 0.6 <= took < 3, took
    assert "got SIGTERM" in lines(real, pod_id)
    system = lines(real, pod_id, "system")
    assert "container did not stop within 0.6s" in system
    assert system[-1] == "container exited with code -9"
    assert real.read_volume_file(VOLUME, "saved-on-sigterm.txt") is None
    assert api.get(f"/v2/pods/{pod_id}").json()["status"] == "EXITED"


def test_a_process_that_exits_by_itself_stops_the_pod(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with Sandbox(
        startup_seconds=0.05,
        trainer="real",
        trainer_command=[sys.executable, "-c", "import sys; print('bye'); sys.exit(3)"],
        data_dir=tmp_path,
    ) as sb:
        pod = sb.model.create_pod(
            {"name": "x", "imageName": "tensorant/trainer:1.0", "gpuTypeId": "NVIDIA A40"}
        )
        until(lambda: sb.model.pods[pod.id].desired_status == "EXITED")
        assert lines(sb, pod.id) == ["bye"]
        assert "container exited with code 3" in lines(sb, pod.id, "system")
    assert tmp_path.exists()  # a data_dir that was given is not removed
