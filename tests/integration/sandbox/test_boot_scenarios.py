"""R14, the sandbox's side: a run's Pod on the public image is a trainer Pod (its start
command is recorded as sent), and the scenarios that break a boot: `image_pull_fails` and
`cuda_mismatch` never start the container and repeat RunPod's line on the Pod's log until the
Pod goes; `silent_after_start` reports, trains, then prints nothing at all."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from runpod_sandbox import Sandbox
from trainer.protocol.reports import parse_report_line

START = "bash -c 'echo boot'"
BODY: dict[str, Any] = {
    "name": "tensorant-run-boot",
    "image": "runpod/pytorch:1.0.7-cu1300-torch291-ubuntu2404",
    "args": START,
    "gpu": {"id": "NVIDIA GeForce RTX 4090", "count": 1, "minCudaVersion": "13.0"},
    "dataCenterIds": ["EU-RO-1"],
    "mounts": {"network": [{"volumeId": "nv7eu1ro4k", "path": "/workspace"}]},
    "env": {"TENSORANT_RUN_ID": "r1"},
}


def _until(check: Callable[[], Any], timeout: float = 10) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    return value


def _create(sandbox: Sandbox, **changes: Any) -> str:
    key = sandbox.credentials()["api_key"]
    with httpx.Client(base_url=sandbox.base_url, headers={"Authorization": f"Bearer {key}"}) as c:
        answer = c.post("/v2/pods", json={**BODY, **changes})
        assert answer.status_code == 201, answer.text
        return str(answer.json()["id"])


def _record(sandbox: Sandbox, pod_id: str) -> dict[str, Any]:
    pods = httpx.get(f"{sandbox.base_url}/_sandbox/pods").json()["pods"]
    return next(p for p in pods if p["id"] == pod_id)


def _lines(sandbox: Sandbox, pod_id: str, source: str) -> list[str]:
    with sandbox.model.lock:
        return [line for _t, _n, s, line in sandbox.model.pod_logs.get(pod_id, []) if s == source]


@pytest.mark.parametrize(
    ("scenario", "line"),
    [
        ("image_pull_fails", "error pulling image: Error response from daemon: pull access denied"),
        (
            "cuda_mismatch",
            "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=13.0",
        ),
    ],
)
def test_a_pod_that_never_starts_repeats_why_until_it_goes(
    sandbox: Sandbox, scenario: str, line: str
) -> None:
    sandbox.set_scenario(scenario)
    pod_id = _create(sandbox)
    record = _record(sandbox, pod_id)
    assert (record["image_name"], record["start_command"]) == (BODY["image"], START)
    assert (record["scenario"], record["status"]) == (scenario, "RUNNING")
    _until(lambda: sum(line in x for x in _lines(sandbox, pod_id, "system")) >= 3)
    sandbox.advance_clock(3600)  # an hour on: still no runtime, still RUNNING, still billing
    record = _record(sandbox, pod_id)
    assert (record["runtime_ready"], record["status"]) == (False, "RUNNING")
    assert _lines(sandbox, pod_id, "container") == []  # the container never ran
    assert not any("start container" in x for x in _lines(sandbox, pod_id, "system"))
    sandbox.model.terminate_pod(pod_id)
    [loop] = [t for t in sandbox._trainer.threads if t.name.endswith(pod_id)]  # type: ignore[union-attr]
    loop.join(5)  # the loop that repeats the line has ended: nothing can follow the removal
    assert not loop.is_alive()
    system = _lines(sandbox, pod_id, "system")
    assert system[-1].startswith("remove container"), system[-3:]


def test_silent_after_start_reports_trains_then_prints_nothing(sandbox: Sandbox) -> None:
    sandbox.set_scenario("silent_after_start")
    pod_id = _create(sandbox, image="tensorant/trainer:1.0", args="")
    sandbox.set_scenario("hang")  # its twin prints a line every 0.25 s once it has trained
    twin = _create(sandbox, image="tensorant/trainer:1.0", args="", name="twin")

    def reports() -> list[Any]:
        out = [parse_report_line(x) for x in _lines(sandbox, pod_id, "container")]
        return [r for r in out if r is not None]

    trained = _until(
        lambda: [r for r in reports() if getattr(r, "phase", "") == "training"][1:] or None
    )
    assert trained[-1].step == 2
    # the step's own log line follows its progress report; only after it is the trainer done
    _until(lambda: any(getattr(r, "text", "").startswith("step 2/") for r in reports()))
    settled = len(_lines(sandbox, pod_id, "container"))

    def chatter() -> int:
        return sum("NCCL barrier" in x for x in _lines(sandbox, twin, "container"))

    seen = _until(chatter)
    _until(lambda: chatter() >= seen + 4)  # four beats of the hung twin's chatter meanwhile
    assert len(_lines(sandbox, pod_id, "container")) == settled
    assert not any(getattr(r, "phase", "") == "exporting" for r in reports())
    assert _record(sandbox, pod_id)["status"] == "RUNNING"


def test_a_pod_on_another_image_without_a_start_command_runs_no_trainer(
    sandbox: Sandbox,
) -> None:
    pod_id = _create(sandbox, image="bench/no-trainer:1.0", args="")
    twin = _create(sandbox, image="tensorant/trainer:1.0", args="", name="twin")
    _until(lambda: _lines(sandbox, twin, "container"))  # a trainer Pod, created after, printed
    assert _lines(sandbox, pod_id, "container") == []
    assert _record(sandbox, pod_id)["scenario"] is None
