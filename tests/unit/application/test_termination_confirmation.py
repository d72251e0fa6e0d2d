"""K2/K3: a termination counts only once a read of RunPod shows the Pod gone. A read that fails
proves nothing, and neither does a Pod RunPod still lists as stopped (a stopped Pod keeps its
disk and bills for it): both leave the Pod in cleanup, costed, until a later read confirms it
gone. Driven through the service layer on fakes; the cleanup items are the ones `GET
/v1/cleanup` shows, computed from the run's own events."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest

from application import errors
from application.pods import pod_name
from application.ports import POD_STOPPED, PodInfo
from application.services import Services
from projections.reports.cleanup import cleanup_items
from projections.views.runs import apply_event, new_doc
from tests.fakes import FakeCompute, FixedClock
from tests.unit.application.conftest import new_services, seed_org

ATTEMPTS = 3  # `max_termination_attempts` of the conftest's services


@dataclass
class HardOfHearing(FakeCompute):
    """RunPod whose terminate of some Pods answers OK and does nothing, and whose direct read of
    some Pods fails."""

    ignores: set[str] = field(default_factory=set)
    unreadable: set[str] = field(default_factory=set)

    def terminate_pod(self, api_key: str, pod_id: str) -> None:
        self._auth(api_key, write=True)
        self.calls.append(("terminate", pod_id))
        if pod_id not in self.ignores:
            self.pods.pop(pod_id, None)

    def get_pod(self, api_key: str, pod_id: str) -> PodInfo | None:
        if pod_id in self.unreadable:
            raise errors.ProviderUnavailable("RunPod did not answer")
        return super().get_pod(api_key, pod_id)


@dataclass
class World:
    app: Services
    compute: HardOfHearing
    clock: FixedClock
    org: str
    run_id: str

    def run(self) -> tuple[str, str, int]:
        run = self.app.log.run(self.org, self.run_id)
        return run.state, run.pod_status, run.termination_attempts

    def cleanup(self) -> list[dict[str, Any]]:
        """The run's items on the cleanup page now (the run view over its events)."""
        events: list[Any] = list(self.app.log.repository.event_store.get(UUID(self.run_id)))
        doc = new_doc(self.run_id, events[0])
        for event in events[1:]:
            apply_event(doc, event)
        return cleanup_items([doc], self.clock.now())

    def drive(self, times: int = 1) -> None:
        """The reactor's pass over the run, `times` times, each after the termination backoff."""
        for _ in range(times):
            self.clock.advance(600)
            self.app.reactor.drive_run(self.run_id)


@pytest.fixture
def world(tmp_path: Path) -> World:
    f = new_services(tmp_path, HardOfHearing())
    assert isinstance(f.compute, HardOfHearing)
    org, run_id = seed_org(f.services)
    return World(f.services, f.compute, f.clock, org, run_id)


def running(world: World) -> str:
    world.app.runs.launch(world.org, world.run_id, "owner", True, "1.64")
    world.app.reactor.drive_run(world.run_id)
    pod = world.app.log.run(world.org, world.run_id).pod_id or ""
    assert world.run()[:2] == ("running", "running") and pod in world.compute.pods
    return pod


def test_k2_a_failed_read_after_terminate_leaves_the_pod_terminating_and_in_cleanup(
    world: World,
) -> None:
    """Terminate answers OK, RunPod keeps the Pod, the read after it fails: nothing is known, so
    nothing is confirmed. Once a read works and finds the Pod gone, it is confirmed."""
    pod = running(world)
    world.compute.ignores.add(pod)
    world.compute.unreadable.add(pod)
    world.app.runs.cancel(world.org, world.run_id, "owner")
    world.drive()
    assert world.run() == ("cancelling", "terminating", 1)
    assert pod in world.compute.pods and ("terminate", pod) in world.compute.calls
    [item] = world.cleanup()
    assert (item["kind"], item["pod_id"], item["price_per_hour"]) == ("terminating", pod, "1.64")
    # RunPod takes the next terminate, but the read still fails: still not confirmed.
    world.compute.ignores.clear()
    world.drive()
    assert pod not in world.compute.pods
    state, pod_status, attempts = world.run()
    assert (state, pod_status) == ("cancelling", "terminating") and attempts == 2
    assert [i["kind"] for i in world.cleanup()] == ["terminating"]
    # A read that works finds the Pod gone: confirmed, and out of cleanup.
    world.compute.unreadable.clear()
    world.drive()
    assert world.run()[:2] == ("cancelled", "terminated")
    assert world.cleanup() == []


def test_k3_a_failed_read_after_every_terminate_reaches_needs_manual_not_terminated(
    world: World,
) -> None:
    pod = running(world)
    world.compute.ignores.add(pod)
    world.compute.unreadable.add(pod)
    world.app.runs.cancel(world.org, world.run_id, "owner")
    world.drive(ATTEMPTS + 1)
    assert world.run() == ("cancelling", "needs_manual", ATTEMPTS)
    [item] = world.cleanup()
    assert item["kind"] == "needs_manual" and Decimal(item["cost_so_far"]) > 0


def test_k3_a_stopped_pod_whose_release_runpod_ignores_needs_manual_and_stays_costed(
    world: World,
) -> None:
    """A stopped Pod RunPod still lists is not gone: its disk bills until RunPod drops it."""
    pod = running(world)
    world.clock.advance(3600)  # an hour of GPU time before the trainer failed
    token = world.app.trainer.token(world.run_id)
    world.app.trainer.failed(world.run_id, token, "oom", "CUDA out of memory")
    world.app.reactor.drive_run(world.run_id)
    assert world.run()[:2] == ("needs_recovery", "stopped")
    assert world.compute.pods[pod].status == POD_STOPPED
    [retained] = world.cleanup()
    assert retained["kind"] == "retained"
    world.compute.ignores.add(pod)
    world.app.runs.release_pod(world.org, world.run_id, "owner", True)
    world.drive()
    assert world.run()[1:] == ("terminating", 1)
    world.drive(ATTEMPTS)
    assert world.run()[1:] == ("needs_manual", ATTEMPTS)
    assert world.compute.pods[pod].status == POD_STOPPED  # RunPod still lists it, stopped
    [item] = world.cleanup()
    assert item["kind"] == "needs_manual" and item["attempts"] == ATTEMPTS
    assert Decimal(item["cost_so_far"]) >= Decimal("1.64")  # the hour it ran, at least
    world.drive()  # still listed: still in cleanup, never confirmed
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])  # nor by the reconciler
    assert world.run()[1] == "needs_manual"
    [later] = world.cleanup()
    assert later["kind"] == "needs_manual"
    assert Decimal(later["cost_so_far"]) >= Decimal(item["cost_so_far"])
    # Removed by hand in RunPod's console: the next look confirms it.
    world.compute.ignores.clear()
    del world.compute.pods[pod]
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])
    assert world.run()[1] == "terminated" and world.cleanup() == []


def test_k3_a_stopped_orphan_whose_release_runpod_ignores_needs_manual_and_stays_listed(
    world: World,
) -> None:
    pod_id = "stoppedorphan1"
    world.compute.pods[pod_id] = PodInfo(
        pod_id,
        pod_name(str(uuid4())),
        POD_STOPPED,
        Decimal("0.69"),
        uptime_seconds=600,
        container_disk_gb=20,
        volume_gb=50,
    )
    world.compute.ignores.add(pod_id)
    world.app.reconciler.compare_with_runpod(world.org, [])
    world.app.reconciler.release_orphan(world.org, pod_id, "owner", True)
    for _ in range(ATTEMPTS + 1):
        world.clock.advance(600)
        world.app.reconciler.compare_with_runpod(world.org, [])
    orphans = world.app.log.orphan_pods(world.org)
    assert orphans is not None and orphans.is_live(pod_id)
    assert orphans.pods[pod_id]["state"] == "needs_manual"
    assert orphans.pods[pod_id]["attempts"] == ATTEMPTS
    del world.compute.pods[pod_id]  # removed by hand in RunPod's console
    world.app.reconciler.compare_with_runpod(world.org, [])
    orphans = world.app.log.orphan_pods(world.org)
    assert orphans is not None and not orphans.is_live(pod_id)
