"""R5's server-side backstop: no Pod bills past its runtime limit even when every worker is down.

PostgreSQL + RabbitMQ, a real `tensorant worker` subprocess on the default wire (REST v2). A
run launches with a one-minute runtime limit, then its only worker is killed with SIGKILL. The
sandbox's clock is moved past the limit plus the grace: RunPod (the sandbox) stops the Pod by
itself, at the `stopAfter` the create sent, while nothing of ours runs. A worker started once
the limit has passed on its own clock reconciles the stopped Pod into the run: `needs_recovery`
at `runtime_limit`, the Pod retained and listed in cleanup, its bill ending at `stopAfter`.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from runpod_sandbox import Sandbox
from tests.chaos.conftest import Workers, all_pods, wait_settled, with_retries
from tests.e2e.conftest import Api
from tests.e2e.test_runs import ready

GRACE_MINUTES = 0.1  # RunPod stops the Pod 6 s after the runtime limit


@pytest.fixture(scope="module")
def box() -> Iterator[Sandbox]:
    with Sandbox(startup_seconds=0.1) as sb:
        yield sb


@pytest.fixture(scope="module")
def crash_settings() -> dict[str, Any]:
    return {"stop_after_grace_minutes": GRACE_MINUTES}


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def wait_for(what: str, probe: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


@pytest.mark.slow
# One worker and one API server, most of it a minute's wait on the wall clock: it runs beside
# the other tests rather than stopping them for that minute.
@pytest.mark.shares
@pytest.mark.postgres
@pytest.mark.rabbitmq
@pytest.mark.timeout(300)
def test_runpod_stops_the_pod_itself_with_every_worker_down_and_a_new_worker_reconciles_it(
    crash_stack: tuple[Api, dict[str, str]], box: Sandbox, tmp_path: Any
) -> None:
    api, env = crash_stack
    workers = Workers(env, tmp_path)  # the stack's default wire: REST v2
    workers.spawn()
    try:
        org, config = ready(api, box.credentials())
        box.set_scenario("hang", 1)  # trains, then only plain lines: nothing of ours stops it
        run = with_retries(
            lambda: org.member.post("/v1/runs", json={**config, "max_runtime_minutes": 1}),
            ok=(201,),
        ).json()
        launched = org.member.post(
            f"/v1/runs/{run['id']}/launch",
            json={"confirm": True, "accepted_price_per_hour": "1.64"},
        )
        assert launched.status_code == 202, launched.text
        doc = wait_for(
            "the run to train",
            lambda: (
                (d := org.member.get(f"/v1/runs/{run['id']}").json())["state"] == "running" and d
            ),
        )
        proc, _ = workers.procs.pop(0)  # every worker down: nothing of ours can stop the Pod
        proc.send_signal(signal.SIGKILL)
        proc.wait()

        [pod] = [p for p in all_pods(box) if p["name"] == f"tensorant-run-{run['id']}"]
        assert pod["status"] == "RUNNING" and pod["stop_after"], pod
        stop_after = _time(pod["stop_after"])
        started = _time(doc["started_at"])
        # The create asked RunPod to stop the Pod at the runtime limit plus the grace.
        assert abs((stop_after - started).total_seconds() - (60 + GRACE_MINUTES * 60)) < 5
        with httpx.Client(base_url=f"{box.base_url}/_sandbox", timeout=10) as admin:
            now = _time(admin.get("/clock").json()["now"])
            ahead = (stop_after - now).total_seconds() + 30
            admin.post("/clock", json={"advance_seconds": ahead}).raise_for_status()
        [pod] = [p for p in all_pods(box) if p["id"] == pod["id"]]
        assert pod["status"] == "EXITED", pod  # RunPod (the sandbox) stopped it by itself
        assert "stopAfter" in pod["last_status_change"], pod
        assert org.member.get(f"/v1/runs/{run['id']}").json()["state"] == "running"
        ledger = box.model.ledger.charges
        gpu = [c for c in ledger if c.resource_id == pod["id"] and c.category == "gpu"]
        assert max(c.end for c in gpu) == stop_after  # billed no longer than stopAfter

        # A worker restarted after the limit (on its own clock) reconciles the stopped Pod.
        wait_s = (started - datetime.now(UTC)).total_seconds() + 61
        time.sleep(max(0.0, wait_s))  # fixed-sleep-ok: the worker reads the wall clock
        workers.spawn()
        docs = wait_settled(org, [run["id"]], timeout=90)
    finally:
        workers.stop_all()
    done = docs[run["id"]]
    assert (done["state"], done["state_reason"]) == ("needs_recovery", "runtime_limit"), done
    assert done["cleanup"]["pod_status"] == "stopped"
    items = org.member.get("/v1/cleanup").json()["items"]
    assert [i["kind"] for i in items if i["run_id"] == run["id"]] == ["retained"]
    [pod] = [p for p in all_pods(box) if p["id"] == pod["id"]]
    assert pod["status"] == "EXITED"  # stopped and kept: its checkpoints may be the only copy
