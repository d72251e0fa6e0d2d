"""Cleanup you can trust (K1–K3, C4) over HTTP against a sandbox of its own.

The sandbox is private to this module: orphans made here must not show up in the cleanup views
of organizations other tests share the session sandbox with.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from entrypoints.server import serve_with_sandbox
from entrypoints.settings import Settings
from runpod_sandbox import Sandbox
from tests.e2e.conftest import Api, Org, connect, problem
from tests.e2e.test_runs import draft, launch, ready, sandbox_pods, wait_state

INTERVAL = 0.5
MAX_ATTEMPTS = 3


@pytest.fixture(scope="module")
def box() -> Iterator[Sandbox]:
    with Sandbox(startup_seconds=0.1) as sb:
        yield sb


@pytest.fixture(scope="module")
def cstack(box: Sandbox, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    data_dir: Path = tmp_path_factory.mktemp("cleanup")
    # Its own sandbox and key: the endpoints may be looked at every 2 s (V3 orphans).
    settings = Settings(data_dir=data_dir, serving_endpoints_interval=2)
    server, container = serve_with_sandbox(
        settings,
        box,
        reconcile_interval=INTERVAL,
        projection_poll_interval=0.2,
        max_termination_attempts=MAX_ATTEMPTS,
        termination_backoff_seconds=0.2,
    )
    api = Api("sqlite-cleanup", server.base_url, container, box, settings)
    try:
        yield api
    finally:
        api.close()
        server.stop()


@pytest.fixture
def ctx(cstack: Api, box: Sandbox) -> Iterator[tuple[Api, dict[str, Any]]]:
    box.model.clear_faults()
    box.set_scenario("success", 0)
    yield cstack, box.credentials()
    box.model.clear_faults()


def until(check: Callable[[], Any], timeout: float = 20, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def items(org: Org) -> list[dict[str, Any]]:
    body: dict[str, Any] = org.member.get("/v1/cleanup").json()
    return list(body["items"])


def item_for(org: Org, pod_id: str) -> dict[str, Any] | None:
    return next((i for i in items(org) if i["pod_id"] == pod_id), None)


def sandbox_pod(box: Sandbox, pod_id: str) -> dict[str, Any]:
    pods = httpx.get(f"{box.base_url}/_sandbox/pods").json()["pods"]
    return next(p for p in pods if p["id"] == pod_id)


def running_run(api: Api, org: Org, config: dict[str, Any]) -> dict[str, Any]:
    run = draft(org, config)
    api.sandbox.set_scenario("hang", 1)
    launch(org, run["id"])
    return wait_state(org, run["id"], "running")


def test_k2_a_pod_terminated_in_the_console_is_recorded_gone_within_one_reconcile_interval(
    ctx: tuple[Api, dict[str, Any]],
) -> None:
    api, creds = ctx
    org, config = ready(api, creds)
    run = running_run(api, org, config)
    r = httpx.post(f"{api.sandbox.base_url}/_sandbox/pods/{run['pod_id']}/terminate")
    assert r.status_code == 200
    start = time.monotonic()
    body = wait_state(org, run["id"], "failed", timeout=10)
    elapsed = time.monotonic() - start
    # One interval, plus the projection poll and one HTTP round of slack.
    assert elapsed < INTERVAL + 1.5, elapsed
    assert body["state_reason"] == "pod_vanished" and body["cleanup"]["pod_status"] == "gone"
    assert item_for(org, run["pod_id"]) is None
    types = [e["type"] for e in org.auditor.get(f"/v1/runs/{run['id']}/events").json()["events"]]
    assert "PodVanished" in types and "PodTerminated" not in types


def test_k3_a_pod_that_cannot_be_terminated_needs_manual_stays_listed_and_costed_and_c4_holds(
    ctx: tuple[Api, dict[str, Any]],
) -> None:
    """Also acceptance 4: terminate answers success, the Pod stays, nothing is confirmed."""
    api, creds = ctx
    org, config = ready(api, creds)
    run = running_run(api, org, config)
    pod_id = run["pod_id"]
    api.sandbox.set_faults(terminate_lies=-1)
    assert org.member.post(f"/v1/runs/{run['id']}/cancel").status_code == 202
    seen: list[str] = []

    def manual() -> dict[str, Any] | None:
        doc = org.member.get(f"/v1/runs/{run['id']}").json()
        seen.append(doc["cleanup"]["pod_status"])
        assert sandbox_pod(api.sandbox, pod_id)["status"] == "RUNNING"
        return doc if doc["cleanup"]["pod_status"] == "needs_manual" else None

    doc = until(manual, what="needs_manual")
    assert "terminated" not in seen  # never confirmed while RunPod still lists the Pod
    assert doc["cleanup"]["attempts"] == MAX_ATTEMPTS and doc["cleanup"]["last_error"]
    item = item_for(org, pod_id)
    assert item is not None and item["kind"] == "needs_manual"
    assert item["attempts"] == MAX_ATTEMPTS and item["price_per_hour"] == "1.64"
    assert float(item["cost_so_far"]) > 0 and float(item["storage_cost_per_hour"]) > 0
    # C4: the key stays while a Pod awaits cleanup; a rotation keeps the work going.
    problem(org.owner.delete("/v1/connections/runpod"), 409, "pods-depend-on-key")
    r = org.owner.post("/v1/connections/runpod/rotate", json={"api_key": creds["api_key"]})
    assert r.status_code == 200, r.text
    api.after_reconcile_passes()  # the reconciler keeps checking; still listed, still costed
    later = item_for(org, pod_id)
    assert later is not None and later["kind"] == "needs_manual"
    assert float(later["cost_so_far"]) >= float(item["cost_so_far"])
    # The Pod disappears later (someone removed it in the console): confirmed then.
    api.sandbox.model.clear_faults()
    httpx.post(f"{api.sandbox.base_url}/_sandbox/pods/{pod_id}/terminate")
    done = wait_state(org, run["id"], "cancelled", timeout=10)
    assert done["cleanup"]["pod_status"] == "terminated"
    assert item_for(org, pod_id) is None
    assert org.owner.delete("/v1/connections/runpod").status_code == 204


def test_k1_a_pod_with_our_naming_outside_any_run_is_an_orphan_and_can_be_released(
    ctx: tuple[Api, dict[str, Any]],
) -> None:
    api, creds = ctx
    org, _ = ready(api, creds)
    name = f"tensorant-run-{uuid.uuid4()}"
    made = httpx.post(
        f"{api.sandbox.base_url}/_sandbox/pods",
        json={"name": name, "gpu_type_id": "NVIDIA A40", "container_disk_in_gb": 20},
    )
    assert made.status_code == 201, made.text
    pod_id = made.json()["id"]
    item = until(lambda: item_for(org, pod_id), what="the orphan in /v1/cleanup")
    assert item["kind"] == "orphan" and item["run_id"] == name.removeprefix("tensorant-run-")
    assert item["pod_status"] == "orphan"
    assert Decimal(item["price_per_hour"]) == Decimal(made.json()["cost_per_hr"])
    assert float(item["storage_cost_per_hour"]) > 0
    until(lambda: float(item_for(org, pod_id)["cost_so_far"]) > 0, what="cost so far")  # type: ignore[index]
    # C4: an orphan also needs the key.
    problem(org.owner.delete("/v1/connections/runpod"), 409, "pods-depend-on-key")
    audit = org.auditor.get("/v1/audit/events", params={"type": "OrphanPodFound"}).json()
    assert [e["data"]["pod_id"] for e in audit["events"]] == [pod_id]
    metrics = org.member.get("/metrics").text
    assert "tensorant_orphan_pods" in metrics and "tensorant_reconcile_lag_seconds" in metrics
    problem(
        org.auditor.post(f"/v1/cleanup/orphans/{pod_id}/release", json={"confirm": True}),
        403,
        "forbidden",
    )
    problem(
        org.member.post(f"/v1/cleanup/orphans/{pod_id}/release", json={}),
        422,
        "confirmation-required",
    )
    problem(
        org.member.post("/v1/cleanup/orphans/nope/release", json={"confirm": True}),
        404,
        "not-found",
    )
    r = org.member.post(f"/v1/cleanup/orphans/{pod_id}/release", json={"confirm": True})
    assert r.status_code == 202, r.text
    until(lambda: item_for(org, pod_id) is None, what="the released orphan to go")
    assert sandbox_pod(api.sandbox, pod_id)["status"] == "TERMINATED"
    types = [e["type"] for e in org.auditor.get("/v1/audit/events").json()["events"]]
    assert types.index("OrphanReleaseRequested") < types.index("OrphanPodGone")
    assert org.owner.delete("/v1/connections/runpod").status_code == 204


def test_k1_a_released_orphan_that_will_not_die_needs_manual_and_stays_visible(
    ctx: tuple[Api, dict[str, Any]],
) -> None:
    api, creds = ctx
    org, _ = ready(api, creds)
    made = httpx.post(
        f"{api.sandbox.base_url}/_sandbox/pods", json={"name": f"tensorant-run-{uuid.uuid4()}"}
    ).json()
    until(lambda: item_for(org, made["id"]), what="the orphan")
    api.sandbox.set_faults(terminate_lies=-1)
    r = org.member.post(f"/v1/cleanup/orphans/{made['id']}/release", json={"confirm": True})
    assert r.status_code == 202, r.text
    item = until(
        lambda: (i := item_for(org, made["id"])) and i["pod_status"] == "needs_manual" and i,
        what="needs_manual",
    )
    assert item["kind"] == "orphan" and item["attempts"] == MAX_ATTEMPTS and item["last_error"]
    api.sandbox.model.clear_faults()
    httpx.post(f"{api.sandbox.base_url}/_sandbox/pods/{made['id']}/terminate")
    until(lambda: item_for(org, made["id"]) is None, what="the orphan to be confirmed gone")


def test_r5_a_pod_created_then_answered_500_is_adopted_by_its_run_not_an_orphan(
    ctx: tuple[Api, dict[str, Any]],
) -> None:
    api, creds = ctx
    org, config = ready(api, creds)
    run = draft(org, config)
    api.sandbox.set_faults(create_then_500=1)
    launch(org, run["id"])
    wait_state(org, run["id"], "succeeded")
    pods = sandbox_pods(api.sandbox, run["id"])
    assert len(pods) == 1 and pods[0]["status"] == "TERMINATED"
    api.after_reconcile_passes()  # a pass that took the Pod for an orphan would have said so
    assert items(org) == []
    audit = org.auditor.get("/v1/audit/events", params={"type": "OrphanPodFound"}).json()
    assert audit["events"] == []


def test_v3_an_endpoint_with_our_naming_no_deployment_keeps_is_an_orphan_until_runpod_drops_it(
    ctx: tuple[Api, dict[str, Any]],
) -> None:
    """Made directly at RunPod with the organization's key (a deployment deleted while
    RunPod kept the endpoint looks the same): the reconciler lists it in cleanup as an
    orphan endpoint with what it costs per hour (one worker kept up at $0.00019 a second on
    ADA_24) and what to do; deleted at RunPod, it leaves cleanup."""
    api, creds = ctx
    org = api.new_org()
    connect(org, creds)
    runpod = httpx.Client(
        base_url=api.sandbox.base_url,
        headers={"Authorization": f"Bearer {creds['api_key']}"},
        timeout=30,
    )
    made = runpod.post(
        "/v2/serverless",
        json={
            "name": f"tensorant-serve-{uuid.uuid4().hex[:20]}",
            "image": "runpod/worker-v1-vllm:v2.25.0",
            "gpu": {"pools": ["ADA_24"], "count": 1},
            "workers": {"min": 1, "max": 1, "idleTimeout": 5},
        },
    )
    assert made.status_code == 201, made.text
    endpoint_id = made.json()["id"]

    def orphan() -> dict[str, Any] | None:
        return next((i for i in items(org) if i["endpoint_id"] == endpoint_id), None)

    item = until(orphan, 60, what="the orphan endpoint in /v1/cleanup")
    assert item["kind"] == "orphan_endpoint" and item["pod_name"] == made.json()["name"]
    assert (item["workers_up"], item["workers_min"]) == (1, 1)
    assert Decimal(item["price_per_hour"]) == Decimal("0.00019") * 3600
    assert "no deployment keeps" in item["warning"] and "Delete it" in item["warning"]

    def seen() -> list[str]:
        audit = org.auditor.get("/v1/audit/events", params={"type": "ServingEndpointSeen"})
        return [e["data"]["endpoint_id"] for e in audit.json()["events"]]

    assert until(seen, 60, what="the audit entry") == [endpoint_id]  # the audit view may lag
    assert runpod.delete(f"/v2/serverless/{endpoint_id}").status_code == 204
    until(lambda: orphan() is None, 60, what="the deleted orphan endpoint to leave cleanup")
    assert items(org) == []
