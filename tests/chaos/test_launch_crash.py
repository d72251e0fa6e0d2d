"""R5, deterministically: one launch makes one Pod even when the worker dies, or RunPod's answer
is lost, exactly between RunPod's create and our save.

PostgreSQL + RabbitMQ, real `tensorant worker` subprocesses on each RunPod wire, the real
RunPodCompute (its name lookup, not a fake's). The sandbox creates the Pod and holds the
create's HTTP answer (`hold_creates`), so the test observes "created, answer held" and then:
(a) SIGKILLs the worker and starts another, or (b) lets the create answer 500 while Pod
listings fail, so the worker cannot look again and gives up. Either way the run must end with
exactly one Pod at RunPod (GET /_sandbox/pods), the one the run adopted. Removing the lookup
before create (or the look-again after a doubtful one) from RunPodCompute fails these tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from adapters.runpod import APIS
from runpod_sandbox import Sandbox
from tests.chaos.conftest import Workers, all_pods, wait_for, with_retries
from tests.e2e.conftest import Api, Org
from tests.e2e.test_runs import ready


@pytest.fixture
def admin(box: Sandbox) -> Iterator[httpx.Client]:
    """The sandbox's admin routes, as a test drives them over HTTP; nothing stays held."""
    with httpx.Client(base_url=f"{box.base_url}/_sandbox", timeout=10) as client:
        yield client
        client.post("/held/release", json={})
        client.post("/faults", json={})


@dataclass
class Wire:
    """One RunPod wire's workers and an organization ready to launch, shared by its tests."""

    api: str
    workers: Workers
    org: Org
    config: dict[str, Any]


@pytest.fixture(scope="module", params=APIS)
def wire(
    request: pytest.FixtureRequest,
    crash_stack: tuple[Api, dict[str, str]],
    box: Sandbox,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Wire]:
    stack, env = crash_stack
    api = str(request.param)
    workers = Workers({**env, "TENSORANT_RUNPOD_API": api}, tmp_path_factory.mktemp(api))
    workers.spawn()  # starts while the organization is set up
    try:
        org, config = ready(stack, box.credentials())
        yield Wire(api, workers, org, config)
    finally:
        workers.stop_all()


def launch_held(wire: Wire, admin: httpx.Client) -> tuple[str, dict[str, Any]]:
    """A run launched while RunPod holds its create's answer; returns it once the Pod exists."""
    org = wire.org
    admin.post("/faults", json={"hold_creates": 1}).raise_for_status()
    # The simulated trainer stays silent: a trainer that reports `exported` first would make
    # the run adopt its Pod through the report (another path, tested elsewhere), and only the
    # adapter's lookup before create must be what prevents a second Pod here.
    admin.post("/scenario", json={"scenario": "hang", "count": 1}).raise_for_status()
    run = with_retries(lambda: org.member.post("/v1/runs", json=wire.config), ok=(201,))
    run_id = run.json()["id"]
    launched = org.member.post(
        f"/v1/runs/{run_id}/launch", json={"confirm": True, "accepted_price_per_hour": "1.64"}
    )
    assert launched.status_code == 202, launched.text
    held = wait_for("RunPod to hold the create", lambda: admin.get("/held").json()["held"])
    assert [h["name"] for h in held] == [f"tensorant-run-{run_id}"]
    assert org.member.get(f"/v1/runs/{run_id}").json()["pod_id"] is None  # not saved yet
    return run_id, held[0]


def assert_one_pod_adopted(wire: Wire, box: Sandbox, run_id: str, held: dict[str, Any]) -> None:
    org = wire.org
    run = wait_for(
        "the run to record its Pod",
        lambda: (d := org.member.get(f"/v1/runs/{run_id}").json())["pod_id"] and d,
        timeout=30,
    )
    pods = [p["id"] for p in all_pods(box) if p["name"] == f"tensorant-run-{run_id}"]
    assert pods == [held["pod_id"]], f"one launch made {len(pods)} Pods ({wire.api})"
    assert run["pod_id"] == held["pod_id"]


@pytest.mark.postgres
@pytest.mark.rabbitmq
def test_r5_a_worker_killed_between_runpods_create_and_our_save_leaves_one_pod_adopted(
    wire: Wire, box: Sandbox, admin: httpx.Client
) -> None:
    run_id, held = launch_held(wire, admin)
    wire.workers.kill_oldest()  # SIGKILL mid-create; another worker starts at once
    assert_one_pod_adopted(wire, box, run_id, held)


@pytest.mark.postgres
@pytest.mark.rabbitmq
def test_r5_a_create_answered_500_after_creating_while_listings_fail_leaves_one_pod_adopted(
    wire: Wire, box: Sandbox, admin: httpx.Client
) -> None:
    run_id, held = launch_held(wire, admin)
    admin.post("/faults", json={"list_pods_error_rate": 1.0}).raise_for_status()
    admin.post("/held/release", json={"fail": True}).raise_for_status()  # HTTP 500
    wait_for(
        "the worker to give up without creating again (or to make a second Pod)",
        lambda: (
            "the Pod list cannot be read" in wire.workers.logs()
            or len([p for p in all_pods(box) if p["name"] == held["name"]]) > 1
        ),
        timeout=30,
    )
    admin.post("/faults", json={}).raise_for_status()  # the listing works again
    assert_one_pod_adopted(wire, box, run_id, held)
