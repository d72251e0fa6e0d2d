"""The reconciler (K1–K3) through the service layer on fakes: RunPod is compared with the model,
a termination counts only once RunPod no longer lists the Pod, orphans are found and released."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from uuid import UUID, uuid4

import pytest

from application import errors
from application.pods import pod_name
from application.ports import PodInfo
from application.services import Services
from domain.orphans import OrphanPods, OrphanReleaseNeedsConfirmation
from tests.fakes import FakeCompute, FixedClock
from tests.unit.application.conftest import new_services, seed_org


@dataclass
class StubbornCompute(FakeCompute):
    """RunPod that ignores some terminations and fails some stops."""

    ignored: set[str] = field(default_factory=set)
    stop_fails: bool = False

    def terminate_pod(self, api_key: str, pod_id: str) -> None:
        if pod_id in self.ignored:
            raise errors.ProviderError("Something went wrong. Please try again later.")
        super().terminate_pod(api_key, pod_id)

    def stop_pod(self, api_key: str, pod_id: str) -> None:
        if self.stop_fails:
            raise errors.ProviderError("Something went wrong. Please try again later.")
        super().stop_pod(api_key, pod_id)


@dataclass
class World:
    app: Services
    compute: StubbornCompute
    clock: FixedClock
    org: str
    run_id: str

    def running(self, run_id: str | None = None) -> str:
        """Launch a run (the world's draft, or a copy) and drive it to a running Pod."""
        run_id = run_id or self.run_id
        self.app.runs.launch(self.org, run_id, "owner", True, "1.64")
        self.app.reactor.drive_run(run_id)
        return self.app.log.run(self.org, run_id).pod_id or ""

    def another_run(self) -> str:
        run_id, _ = self.app.runs.draft(
            self.org, "owner", self.app.log.run(self.org, self.run_id).config
        )
        return run_id

    def events(self, aggregate_id: str | UUID) -> list[str]:
        stream = self.app.log.repository.event_store.get(UUID(str(aggregate_id)))
        return [type(e).__name__ for e in stream]


@dataclass
class Index:
    live: list[tuple[str, str]]
    orgs: list[str]
    passes: list[tuple[datetime, int]] = field(default_factory=list)

    def live_runs(self) -> list[tuple[str, str]]:
        return self.live

    def live_pods(self, org_id: str) -> int:
        return 0

    def org_ids(self) -> list[str]:
        return self.orgs

    def reconciled(self, at: datetime, organizations: int) -> None:
        self.passes.append((at, organizations))


@pytest.fixture
def index() -> Index:
    return Index([], [])


@pytest.fixture
def world(tmp_path: Path, index: Index) -> World:
    f = new_services(tmp_path, StubbornCompute(), index)
    assert isinstance(f.compute, StubbornCompute)
    org, run_id = seed_org(f.services)
    return World(f.services, f.compute, f.clock, org, run_id)


def orphan(compute: FakeCompute, run_id: str, status: str = "running") -> str:
    pod_id = uuid4().hex[:14]
    compute.pods[pod_id] = PodInfo(
        pod_id, pod_name(run_id), status, Decimal("0.69"), uptime_seconds=600, container_disk_gb=20
    )
    return pod_id


def test_k2_a_pod_gone_at_runpod_is_recorded_and_the_run_failed(world: World) -> None:
    pod = world.running()
    del world.compute.pods[pod]
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])
    run = world.app.log.run(world.org, world.run_id)
    assert (run.state, run.state_reason, run.pod_status) == ("failed", "pod_vanished", "gone")


def test_k2_a_pod_stopped_outside_a_training_run_is_recorded_and_its_files_kept(
    world: World,
) -> None:
    pod = world.running()
    world.compute.pods[pod] = replace(world.compute.pods[pod], status="stopped")
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])
    run = world.app.log.run(world.org, world.run_id)
    assert (run.state, run.state_reason, run.pod_status) == (
        "needs_recovery",
        "trainer_crashed",
        "stopped",
    )


def test_k2_an_unknown_runpod_status_is_kept_and_changes_nothing(world: World) -> None:
    pod = world.running()
    world.compute.pods[pod] = replace(world.compute.pods[pod], status="unknown")
    before = world.events(world.run_id)
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])
    assert world.events(world.run_id) == before


def test_k2_k3_a_termination_counts_only_once_runpod_no_longer_lists_the_pod(
    world: World,
) -> None:
    pod = world.running()
    world.compute.ignored.add(pod)
    world.app.runs.cancel(world.org, world.run_id, "owner")
    for _ in range(4):
        world.app.reactor.drive_run(world.run_id)
        world.clock.advance(600)
    run = world.app.log.run(world.org, world.run_id)
    assert (run.state, run.pod_status, run.termination_attempts) == (
        "cancelling",
        "needs_manual",
        3,
    )
    assert pod in world.compute.pods
    world.compute.ignored.clear()
    world.app.reactor.drive_run(world.run_id)
    run = world.app.log.run(world.org, world.run_id)
    assert (run.state, run.pod_status) == ("cancelled", "terminated") and not world.compute.pods


def test_k2_a_provider_error_while_driving_compares_the_organization_at_once(
    world: World, index: Index
) -> None:
    """The failing run's error reveals nothing by itself; the comparison after it finds another
    run's Pod gone at RunPod."""
    other = world.another_run()
    gone = world.running(other)
    world.running()
    del world.compute.pods[gone]
    world.app.trainer.failed(world.run_id, world.app.trainer.token(world.run_id), "oom", "")
    world.compute.stop_fails = True
    index.live = [(world.org, other), (world.org, world.run_id)]
    with pytest.raises(errors.ProviderError):
        world.app.reactor.drive_run(world.run_id)
    assert world.app.log.run(world.org, other).pod_status == "gone"


def test_k1_an_orphan_is_found_and_released_only_with_confirmation(world: World) -> None:
    pod = orphan(world.compute, str(uuid4()))
    world.app.reconciler.compare_with_runpod(world.org, [])
    orphans = world.app.log.orphan_pods(world.org)
    assert orphans is not None
    assert orphans.is_live(pod)
    with pytest.raises(OrphanReleaseNeedsConfirmation):
        world.app.reconciler.release_orphan(world.org, pod, "owner", False)
    world.app.reconciler.release_orphan(world.org, pod, "owner", True)
    assert pod not in world.compute.pods
    assert world.events(OrphanPods.id_for(world.org)) == [
        "OrphanPodsOpened",
        "OrphanPodFound",
        "OrphanReleaseRequested",
        "OrphanPodGone",
    ]


def test_k3_an_orphan_that_will_not_die_needs_manual_and_stays_visible(world: World) -> None:
    pod = orphan(world.compute, str(uuid4()))
    world.compute.ignored.add(pod)
    world.app.reconciler.compare_with_runpod(world.org, [])
    world.app.reconciler.release_orphan(world.org, pod, "owner", True)
    for _ in range(3):
        world.clock.advance(600)
        world.app.reconciler.compare_with_runpod(world.org, [])
    orphans = world.app.log.orphan_pods(world.org)
    assert orphans is not None
    assert orphans.pods[pod]["state"] == "needs_manual" and orphans.is_live(pod)
    assert world.events(OrphanPods.id_for(world.org)).count("OrphanTerminationFailed") == 3


def test_r5_a_pod_named_for_a_launching_run_is_adopted_not_released(world: World) -> None:
    pod = orphan(world.compute, world.run_id)
    world.app.reconciler.compare_with_runpod(
        world.org, []
    )  # a draft owns no Pod: an orphan for now
    world.app.runs.launch(world.org, world.run_id, "owner", True, "1.64")
    world.app.reconciler.compare_with_runpod(world.org, [])
    world.app.reactor.drive_run(world.run_id)
    assert world.app.log.run(world.org, world.run_id).pod_id == pod
    assert list(world.compute.pods) == [pod]
    assert world.events(OrphanPods.id_for(world.org))[-1] == "OrphanPodClaimed"


def test_k2_a_tick_drives_every_live_run_compares_and_records_a_complete_pass(
    world: World, index: Index
) -> None:
    world.app.runs.launch(world.org, world.run_id, "owner", True, "1.64")
    pod = orphan(world.compute, str(uuid4()))
    index.live, index.orgs = [(world.org, world.run_id)], [world.org]
    world.app.reactor.reconcile_tick()
    assert world.app.log.run(world.org, world.run_id).state == "running"
    orphans = world.app.log.orphan_pods(world.org)
    assert orphans is not None
    assert orphans.is_live(pod)
    assert index.passes == [(world.clock.now(), 1)]
    world.compute.unreachable = True
    world.app.reactor.reconcile_tick()
    assert len(index.passes) == 1  # an incomplete pass is not recorded as one


def test_release_of_an_unknown_orphan_is_not_found(tmp_path: Path) -> None:
    app = new_services(tmp_path).services
    org = app.organizations.create("Acme")
    with pytest.raises(Exception, match="not found"):
        app.reconciler.release_orphan(org, "nosuchpod", "owner", True)
