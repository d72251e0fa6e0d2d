"""The reconciler (K1–K3) through the service layer on fakes: RunPod is compared with the model,
a termination counts only once RunPod no longer lists the Pod, orphans are found and released."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest

from application import errors
from application.pods import pod_name
from application.ports import PodInfo
from application.reactor import org_share
from application.services import Services
from domain.orphans import OrphanPods, OrphanReleaseNeedsConfirmation
from tests.fakes import FakeCompute, FixedClock
from tests.unit.application.conftest import new_services, seed_org


@dataclass
class StubbornCompute(FakeCompute):
    """RunPod that ignores some terminations and fails some stops."""

    ignored: set[str] = field(default_factory=set)
    stop_fails: bool = False
    unlisted: set[str] = field(default_factory=set)  # the listing lags behind these Pods
    unreadable: set[str] = field(default_factory=set)  # a direct read no longer finds these
    silent: set[str] = field(default_factory=set)  # terminate answers OK and does nothing
    reads: list[str] = field(default_factory=list)  # every direct read of a Pod
    read_status: dict[str, str] = field(default_factory=dict)  # what a direct read says
    on_read: dict[str, Callable[[], None]] = field(default_factory=dict)  # once, before a read

    def list_pods(self, api_key: str) -> list[PodInfo]:
        return [p for p in super().list_pods(api_key) if p.id not in self.unlisted]

    def get_pod(self, api_key: str, pod_id: str) -> PodInfo | None:
        self.reads.append(pod_id)
        hook = self.on_read.pop(pod_id, None)
        if hook is not None:
            hook()
        found = None if pod_id in self.unreadable else super().get_pod(api_key, pod_id)
        if found is not None and pod_id in self.read_status:
            return replace(found, status=self.read_status[pod_id])
        return found

    def terminate_pod(self, api_key: str, pod_id: str) -> None:
        if pod_id in self.ignored:
            raise errors.ProviderError("Something went wrong. Please try again later.")
        if pod_id in self.silent:
            return
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
    busy: set[str] = field(default_factory=set)

    def live_runs(self) -> list[tuple[str, str]]:
        return self.live

    def busy_org_ids(self) -> set[str]:
        return self.busy

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


# ------------------------------------------------------------ each decision, exactly
def decided(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The reconciler's structured decision lines, in order."""
    return [r.getMessage() for r in caplog.records if hasattr(r, "decision")]


@pytest.fixture
def decisions(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="tensorant.reconcile")
    return caplog


def orphan_events(world: World) -> list[Any]:
    return list(world.app.log.repository.event_store.get(UUID(str(OrphanPods.id_for(world.org)))))


def test_k2_a_vanished_pod_is_decided_with_the_status_it_had(
    world: World, decisions: pytest.LogCaptureFixture
) -> None:
    pod = world.running()
    decisions.clear()
    del world.compute.pods[pod]
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])
    assert decided(decisions) == [
        f"reconcile pod_vanished org={world.org} run={world.run_id} pod={pod} was=running"
    ]


@pytest.mark.parametrize(("failures", "was"), [(1, "terminating"), (3, "needs_manual")])
def test_k2_a_pod_gone_while_terminating_confirms_the_termination(
    world: World, decisions: pytest.LogCaptureFixture, failures: int, was: str
) -> None:
    pod = world.running()
    world.compute.ignored.add(pod)
    world.app.runs.cancel(world.org, world.run_id, "owner")
    for _ in range(failures):
        world.app.reactor.drive_run(world.run_id)
        world.clock.advance(600)
    assert world.app.log.run(world.org, world.run_id).pod_status == was
    decisions.clear()
    del world.compute.pods[pod]
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])
    run = world.app.log.run(world.org, world.run_id)
    assert (run.state, run.pod_status) == ("cancelled", "terminated")
    assert decided(decisions) == [
        f"reconcile pod_terminated_confirmed org={world.org} run={world.run_id} pod={pod} was={was}"
    ]


def test_k2_a_listed_pod_is_not_read_again_and_an_unlisted_one_is(
    world: World, decisions: pytest.LogCaptureFixture
) -> None:
    pod = world.running()
    world.compute.reads.clear()
    before = world.events(world.run_id)
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])
    assert world.compute.reads == []
    world.compute.unlisted.add(pod)  # new Pods can lag in list results: a direct read decides
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])
    assert world.compute.reads == [pod]
    assert world.events(world.run_id) == before


def test_k2_a_pod_listed_as_terminated_is_read_again_and_recorded_gone(world: World) -> None:
    pod = world.running()
    world.compute.pods[pod] = replace(world.compute.pods[pod], status="terminated")
    world.compute.reads.clear()
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])
    assert world.compute.reads == [pod]
    run = world.app.log.run(world.org, world.run_id)
    assert (run.state, run.pod_status) == ("failed", "gone")


def test_k2_a_run_without_a_live_pod_is_not_compared(world: World) -> None:
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])  # a draft
    pod = world.running()
    del world.compute.pods[pod]
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])  # gone: failed
    world.compute.reads.clear()
    before = world.events(world.run_id)
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])
    assert (world.compute.reads, world.events(world.run_id)) == ([], before)


def test_k2_a_stop_pending_keeps_its_reason_when_runpod_shows_the_pod_stopped(
    world: World, decisions: pytest.LogCaptureFixture
) -> None:
    pod = world.running()
    run = world.app.log.run(world.org, world.run_id)
    run.record_export_failed("export_failed", "upload failed", "system", world.clock.now())
    world.app.log.save_all(run)
    world.compute.pods[pod] = replace(world.compute.pods[pod], status="stopped")
    decisions.clear()
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])
    run = world.app.log.run(world.org, world.run_id)
    assert (run.state, run.state_reason, run.pod_status) == (
        "needs_recovery",
        "export_failed",
        "stopped",
    )
    assert decided(decisions) == [
        f"reconcile pod_stopped org={world.org} run={world.run_id} pod={pod} reason=export_failed"
    ]
    decisions.clear()
    before = world.events(world.run_id)
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])
    assert (decided(decisions), world.events(world.run_id)) == ([], before)


def test_k2_an_unknown_status_is_decided_with_runpods_own_words(
    world: World, decisions: pytest.LogCaptureFixture
) -> None:
    pod = world.running()
    world.compute.pods[pod] = replace(
        world.compute.pods[pod], status="unknown", provider_status="MIGRATING"
    )
    decisions.clear()
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])
    assert decided(decisions) == [
        f"reconcile status_unknown_kept org={world.org} run={world.run_id} pod={pod} "
        "provider_status=MIGRATING"
    ]


def test_k1_an_orphan_is_recorded_with_what_runpod_says_of_it(
    world: World, decisions: pytest.LogCaptureFixture
) -> None:
    run_id = str(uuid4())
    world.compute.pods["orph1"] = PodInfo(
        "orph1",
        pod_name(run_id),
        "stopped",
        Decimal("0.69"),
        gpu_type_id="NVIDIA GeForce RTX 4090",
        datacenter_id="EU-RO-1",
        uptime_seconds=600,
        container_disk_gb=20,
        volume_gb=5,
    )
    world.app.reconciler.compare_with_runpod(world.org, [])
    assert decided(decisions) == [
        f"reconcile orphan_found org={world.org} run={run_id} pod=orph1 status=stopped "
        "cost_per_hour=0.69"
    ]
    opened = orphan_events(world)[0]
    assert (getattr(opened, "actor"), opened.timestamp) == ("system", world.clock.now())  # noqa: B009
    found = orphan_events(world)[1]
    assert {k: v for k, v in vars(found).items() if not k.startswith("originator_")} == {
        "timestamp": world.clock.now(),
        "actor": "system",
        "pod_id": "orph1",
        "pod_name": pod_name(run_id),
        "run_id": run_id,
        "status": "stopped",
        "cost_per_hour": Decimal("0.69"),
        "gpu_type_id": "NVIDIA GeForce RTX 4090",
        "datacenter_id": "EU-RO-1",
        "container_disk_gb": 20,
        "volume_gb": 5,
        "uptime_seconds": 600,
    }
    decisions.clear()
    world.app.reconciler.compare_with_runpod(world.org, [])  # known already: nothing new
    assert decided(decisions) == []
    assert len(orphan_events(world)) == 2


def test_k1_pods_that_are_not_orphans(world: World, decisions: pytest.LogCaptureFixture) -> None:
    other_org, other_run = seed_org(world.app)
    assert other_org != world.org
    pods = [
        PodInfo("mine", "my-notebook", "running", Decimal("0.2")),  # not our naming
        PodInfo("done", pod_name(str(uuid4())), "terminated", Decimal("0.2")),
        PodInfo("theirs", pod_name(other_run), "running", Decimal("0.2")),  # another org's run
        PodInfo("just-gone", pod_name(str(uuid4())), "running", Decimal("0.2")),
    ]
    world.compute.pods.update({p.id: p for p in pods})
    world.compute.unreadable.add("just-gone")  # terminated a moment ago: a direct read says so
    world.running()  # and the world's run owns its own Pod
    decisions.clear()
    world.app.reconciler.compare_with_runpod(world.org, [])
    assert decided(decisions) == []
    assert world.app.log.orphan_pods(world.org) is None


def test_k1_the_pod_of_a_finished_run_that_runpod_lists_again_is_an_orphan(
    world: World, decisions: pytest.LogCaptureFixture
) -> None:
    pod = world.running()
    info = world.compute.pods.pop(pod)
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])
    world.compute.pods[pod] = info
    decisions.clear()
    world.app.reconciler.compare_with_runpod(world.org, [])
    assert decided(decisions) == [
        f"reconcile orphan_found org={world.org} run={world.run_id} pod={pod} status=running "
        f"cost_per_hour={info.cost_per_hour}"
    ]


@pytest.mark.parametrize("how", ["unlisted", "listed_terminated"])
def test_k1_an_orphan_runpod_no_longer_has_is_recorded_gone(
    world: World, decisions: pytest.LogCaptureFixture, how: str
) -> None:
    run_id = str(uuid4())
    pod = orphan(world.compute, run_id)
    world.app.reconciler.compare_with_runpod(world.org, [])
    if how == "unlisted":
        del world.compute.pods[pod]
    else:
        world.compute.pods[pod] = replace(world.compute.pods[pod], status="terminated")
    decisions.clear()
    world.app.reconciler.compare_with_runpod(world.org, [])
    assert decided(decisions) == [
        f"reconcile orphan_gone org={world.org} run={run_id} pod={pod} was=orphan"
    ]
    last = orphan_events(world)[-1]
    assert (type(last).__name__, getattr(last, "terminated")) == ("OrphanPodGone", False)  # noqa: B009
    assert (getattr(last, "actor"), last.timestamp) == ("system", world.clock.now())  # noqa: B009
    orphans = world.app.log.orphan_pods(world.org)
    assert orphans is not None and not orphans.is_live(pod)


def test_k1_an_adopted_orphan_is_decided_as_such(
    world: World, decisions: pytest.LogCaptureFixture
) -> None:
    pod = orphan(world.compute, world.run_id)
    world.app.reconciler.compare_with_runpod(world.org, [])
    world.app.runs.launch(world.org, world.run_id, "owner", True, "1.64")
    decisions.clear()
    world.app.reconciler.compare_with_runpod(world.org, [])
    assert decided(decisions) == [
        f"reconcile orphan_adopted org={world.org} run={world.run_id} pod={pod} "  # no extras
    ]


def test_k1_a_released_orphan_is_confirmed_gone_once_runpod_no_longer_lists_it(
    world: World, decisions: pytest.LogCaptureFixture
) -> None:
    run_id = str(uuid4())
    pod = orphan(world.compute, run_id)
    world.app.reconciler.compare_with_runpod(world.org, [])
    decisions.clear()
    assert world.app.reconciler.release_orphan(world.org, pod, "owner", True) > 0
    assert decided(decisions) == [
        f"reconcile orphan_terminated_confirmed org={world.org} run={run_id} pod={pod} "
    ]
    last = orphan_events(world)[-1]
    assert (type(last).__name__, getattr(last, "terminated")) == ("OrphanPodGone", True)  # noqa: B009
    assert (getattr(last, "actor"), last.timestamp) == ("system", world.clock.now())  # noqa: B009


def test_k3_an_orphan_termination_is_retried_after_its_backoff_until_needs_manual(
    world: World, decisions: pytest.LogCaptureFixture
) -> None:
    run_id = str(uuid4())
    pod = orphan(world.compute, run_id)
    world.compute.ignored.add(pod)
    world.app.reconciler.compare_with_runpod(world.org, [])
    decisions.clear()
    released_at = world.clock.now()
    world.app.reconciler.release_orphan(world.org, pod, "owner", True)  # attempt 1, at once

    def state() -> dict[str, Any]:
        orphans = world.app.log.orphan_pods(world.org)
        assert orphans is not None
        return orphans.pods[pod]

    first = (
        f"reconcile orphan_termination_failed org={world.org} run={run_id} pod={pod} "
        "attempt=1 needs_manual=False"
    )
    assert decided(decisions) == [first]
    assert (state()["state"], state()["attempts"], state()["last_error"]) == (
        "terminating",
        1,
        "Something went wrong. Please try again later.",
    )
    world.app.reconciler.compare_with_runpod(world.org, [])  # backoff after 1 failure: 1 s
    world.clock.advance(0.5)
    world.app.reconciler.compare_with_runpod(world.org, [])
    assert decided(decisions) == [first]
    world.clock.advance(0.5)
    world.app.reconciler.compare_with_runpod(world.org, [])
    world.clock.advance(1.9)  # after 2 failures: 2 s
    world.app.reconciler.compare_with_runpod(world.org, [])
    world.clock.advance(0.1)
    world.app.reconciler.compare_with_runpod(world.org, [])
    assert decided(decisions)[1:] == [
        f"reconcile orphan_termination_failed org={world.org} run={run_id} pod={pod} "
        f"attempt={n} needs_manual={n == 3}"
        for n in (2, 3)
    ]
    assert (state()["state"], state()["attempts"]) == ("needs_manual", 3)
    failed = [e for e in orphan_events(world) if type(e).__name__ == "OrphanTerminationFailed"]
    assert [(getattr(e, "actor"), e.timestamp) for e in failed] == [  # noqa: B009
        ("system", t) for t in (released_at, released_at + timedelta(seconds=1), world.clock.now())
    ]
    world.compute.ignored.clear()
    world.clock.advance(3600)
    world.app.reconciler.compare_with_runpod(world.org, [])  # needs manual: no more attempts
    assert pod in world.compute.pods and len(decided(decisions)) == 3
    del world.compute.pods[pod]  # someone deleted it by hand
    world.app.reconciler.compare_with_runpod(world.org, [])
    assert decided(decisions)[3:] == [
        f"reconcile orphan_gone org={world.org} run={run_id} pod={pod} was=needs_manual"
    ]


def test_k3_an_orphan_runpod_still_lists_after_an_ok_is_not_terminated(world: World) -> None:
    pod = orphan(world.compute, str(uuid4()))
    world.compute.silent.add(pod)
    world.app.reconciler.compare_with_runpod(world.org, [])
    world.app.reconciler.release_orphan(world.org, pod, "owner", True)
    orphans = world.app.log.orphan_pods(world.org)
    assert orphans is not None
    assert (orphans.pods[pod]["state"], orphans.pods[pod]["last_error"]) == (
        "terminating",
        "RunPod still lists the Pod",
    )


def test_k1_every_listed_pod_is_examined_after_those_skipped(world: World) -> None:
    known = orphan(world.compute, str(uuid4()))
    world.app.reconciler.compare_with_runpod(world.org, [])  # known: a live orphan now
    world.compute.pods["mine"] = PodInfo("mine", "my-notebook", "running", Decimal("0.2"))
    world.running()  # a Pod its run owns
    gone = orphan(world.compute, str(uuid4()))
    world.compute.unreadable.add(gone)  # terminated a moment ago
    last = orphan(world.compute, str(uuid4()))
    assert list(world.compute.pods)[::4] == [known, last]  # first and last of five
    world.app.reconciler.compare_with_runpod(world.org, [])
    orphans = world.app.log.orphan_pods(world.org)
    assert orphans is not None
    assert set(orphans.live()) == {known, last}


def test_k1_a_pod_a_direct_read_finds_terminated_is_not_an_orphan(world: World) -> None:
    pod = orphan(world.compute, str(uuid4()))
    world.compute.read_status[pod] = "terminated"
    world.app.reconciler.compare_with_runpod(world.org, [])
    assert world.app.log.orphan_pods(world.org) is None


def test_k1_a_pod_its_run_adopted_while_it_was_read_again_is_not_an_orphan(world: World) -> None:
    pod = orphan(world.compute, world.run_id)  # the run is a draft: no owner yet

    def launch_meanwhile() -> None:
        world.app.runs.launch(world.org, world.run_id, "owner", True, "1.64")
        world.app.reactor.drive_run(world.run_id)  # its launch finds the Pod by name

    world.compute.on_read[pod] = launch_meanwhile
    world.app.reconciler.compare_with_runpod(world.org, [])
    assert world.app.log.run(world.org, world.run_id).pod_id == pod
    assert world.app.log.orphan_pods(world.org) is None


def test_k1_orphans_a_run_adopted_are_claimed_and_the_others_still_handled(
    world: World, decisions: pytest.LogCaptureFixture
) -> None:
    adopted = orphan(world.compute, world.run_id)  # named for the draft: an orphan for now
    other_run = str(uuid4())
    other = orphan(world.compute, other_run)
    world.app.reconciler.compare_with_runpod(world.org, [])
    world.running()  # the launch finds its Pod by name and records it
    assert world.app.log.run(world.org, world.run_id).pod_id == adopted
    del world.compute.pods[other]
    world.clock.advance(5)
    decisions.clear()
    world.app.reconciler.compare_with_runpod(world.org, [])
    orphans = world.app.log.orphan_pods(world.org)
    assert orphans is not None and orphans.live() == {}
    claimed = next(e for e in orphan_events(world) if type(e).__name__ == "OrphanPodClaimed")
    assert {k: v for k, v in vars(claimed).items() if not k.startswith("originator_")} == {
        "timestamp": world.clock.now(),
        "actor": "system",
        "pod_id": adopted,
        "run_id": world.run_id,
    }
    assert decided(decisions) == [
        f"reconcile orphan_adopted org={world.org} run={world.run_id} pod={adopted} ",
        f"reconcile orphan_gone org={world.org} run={other_run} pod={other} was=orphan",
    ]


def test_k1_a_listed_orphan_is_not_read_again_and_an_unlisted_one_is(world: World) -> None:
    pod = orphan(world.compute, str(uuid4()))
    world.app.reconciler.compare_with_runpod(world.org, [])
    world.compute.reads.clear()
    world.app.reconciler.compare_with_runpod(world.org, [])
    assert world.compute.reads == []
    world.compute.unlisted.add(pod)  # the listing lags: a direct read still finds it
    world.app.reconciler.compare_with_runpod(world.org, [])
    assert world.compute.reads == [pod]
    orphans = world.app.log.orphan_pods(world.org)
    assert orphans is not None and orphans.is_live(pod)


def test_k3_a_release_that_failed_at_first_is_completed_by_the_reconciler(
    world: World, decisions: pytest.LogCaptureFixture
) -> None:
    run_id = str(uuid4())
    pod = orphan(world.compute, run_id)
    world.compute.ignored.add(pod)
    world.app.reconciler.compare_with_runpod(world.org, [])
    world.app.reconciler.release_orphan(world.org, pod, "owner", True)
    world.compute.ignored.clear()
    world.clock.advance(1)
    decisions.clear()
    world.app.reconciler.compare_with_runpod(world.org, [])
    assert pod not in world.compute.pods
    assert decided(decisions) == [
        f"reconcile orphan_terminated_confirmed org={world.org} run={run_id} pod={pod} "
    ]


def test_k2_a_pass_reconciles_organizations_at_once(world: World, index: Index) -> None:
    """A pass is mostly waiting on RunPod and storage: organizations are reconciled on a few
    threads at once, so a thousand fit in the interval; the pass is recorded once, complete."""
    import threading
    import time

    index.orgs = [f"org-{i}" for i in range(8)]
    inside: set[str] = set()
    most = [0]
    guard = threading.Lock()

    def slow(org_id: str, run_ids: list[str] | None = None) -> bool:
        with guard:
            inside.add(org_id)
            most[0] = max(most[0], len(inside))
        time.sleep(0.05)
        with guard:
            inside.discard(org_id)
        return True

    reactor = replace(
        world.app.reactor, settings=replace(world.app.reactor.settings, reconcile_threads=4)
    )
    object.__setattr__(reactor, "reconcile_org", slow)
    reactor.reconcile_tick()
    assert most[0] == 4
    assert index.passes == [(world.clock.now(), 8)]


def test_k2_a_tick_while_the_last_pass_still_runs_is_skipped(world: World, index: Index) -> None:
    """K2 at scale: passes longer than the interval no longer pile up on the actor's threads."""
    import threading

    index.orgs = ["org-1"]
    entered, leave = threading.Event(), threading.Event()
    calls: list[str] = []

    def slow(org_id: str, run_ids: list[str] | None = None) -> bool:
        calls.append(org_id)
        entered.set()
        leave.wait(10)
        return True

    reactor = world.app.reactor
    object.__setattr__(reactor, "reconcile_org", slow)
    first = threading.Thread(target=reactor.reconcile_tick)
    first.start()
    assert entered.wait(10)
    reactor.reconcile_tick()  # returns at once: the first pass holds the process's turn
    assert calls == ["org-1"]
    leave.set()
    first.join(10)
    reactor.reconcile_tick()  # the next tick after it runs a pass again
    assert calls == ["org-1", "org-1"]
    assert len(index.passes) == 2


def _recording(world: World, **settings: Any) -> tuple[Any, list[str]]:
    """The world's reactor with `reconcile_org` recording the organizations it was given."""
    calls: list[str] = []

    def record(org_id: str, run_ids: list[str] | None = None) -> bool:
        calls.append(org_id)
        return True

    reactor = replace(world.app.reactor, settings=replace(world.app.reactor.settings, **settings))
    object.__setattr__(reactor, "reconcile_org", record)
    return reactor, calls


def test_k2_a_quiet_organization_is_compared_once_in_its_sweep_a_live_one_every_pass(
    world: World, index: Index
) -> None:
    """K2 at scale: an organization with no live run, orphan or deployment is compared once in
    `reconcile_idle_every` passes (a share of them each pass, by id); the others every pass."""
    from collections import Counter

    index.orgs = [f"org-{i}" for i in range(40)]
    index.live = [("org-0", "run-a"), ("org-0", "run-b")]
    index.busy = {"org-1"}  # an orphan not yet gone, or a deployment
    reactor, calls = _recording(world, reconcile_idle_every=5)
    per_pass = []
    for _ in range(5):
        before = len(calls)
        reactor.reconcile_tick()
        per_pass.append(len(calls) - before)
        world.clock.advance(reactor.settings.reconcile_interval_s)
    seen = Counter(calls)
    assert seen["org-0"] == seen["org-1"] == 5
    assert {seen[f"org-{i}"] for i in range(2, 40)} == {1}
    assert max(per_pass) < 40  # no pass compares every quiet organization
    assert len(index.passes) == 5


def test_k2_every_organization_is_compared_every_pass_by_default(
    world: World, index: Index
) -> None:
    index.orgs = [f"org-{i}" for i in range(10)]
    reactor, calls = _recording(world)
    reactor.reconcile_tick()
    world.clock.advance(reactor.settings.reconcile_interval_s)
    reactor.reconcile_tick()
    assert sorted(calls) == sorted(index.orgs * 2)


def test_k2_the_shards_of_a_tick_take_every_organization_once(world: World, index: Index) -> None:
    """K2 at scale: a tick is sent as `reconcile_shards` messages, each a share of the
    organizations, so several workers take one pass between them."""
    index.orgs = [f"org-{i}" for i in range(30)]
    index.live = [("org-3", "run-a"), ("live-elsewhere", "run-b")]
    reactor, calls = _recording(world)
    shares = []
    for shard in range(3):
        before = len(calls)
        reactor.reconcile_tick(shard, 3)
        shares.append(calls[before:])
    assert sorted(calls) == sorted([*index.orgs, "live-elsewhere"])
    assert all(shares)  # each shard took some


def test_k2_a_running_shard_does_not_skip_another_shard(world: World, index: Index) -> None:
    import threading

    index.orgs = [f"org-{i}" for i in range(30)]
    entered, leave = threading.Event(), threading.Event()
    calls: list[str] = []
    first_shard = {o for o in index.orgs if org_share(o, 2) == 0}

    def slow(org_id: str, run_ids: list[str] | None = None) -> bool:
        calls.append(org_id)
        if org_id in first_shard:
            entered.set()
            leave.wait(10)
        return True

    reactor = world.app.reactor
    object.__setattr__(reactor, "reconcile_org", slow)
    first = threading.Thread(target=reactor.reconcile_tick, args=(0, 2))
    first.start()
    assert entered.wait(10)
    reactor.reconcile_tick(0, 2)  # the same shard: skipped
    reactor.reconcile_tick(1, 2)  # the other shard: runs
    leave.set()
    first.join(10)
    assert sorted(calls) == sorted(index.orgs)


def test_k2_a_drive_waiting_for_its_run_takes_the_next_messages_of_that_run_with_it(
    world: World,
) -> None:
    """K2 at scale: while one drive of a run waits for the run's lock in this process, another
    message for the run returns at once (the waiting drive loads the run when its turn comes,
    so it sees that message's event); each used to hold an actor thread meanwhile."""
    import threading
    from contextlib import contextmanager

    class Gate:
        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.attempts = 0

        @contextmanager
        def hold(self, name: str) -> Any:
            self.attempts += 1
            with self.lock:
                yield

    gate = Gate()
    reactor = replace(world.app.reactor, locks=gate)
    gate.lock.acquire()  # another process drives the run now
    waiting = threading.Thread(target=reactor.drive_run, args=(world.run_id,))
    waiting.start()
    deadline = time.monotonic() + 5
    while gate.attempts == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    later = threading.Thread(target=reactor.drive_run, args=(world.run_id,))
    later.start()
    later.join(5)
    assert not later.is_alive()  # returned without waiting
    assert gate.attempts == 1
    gate.lock.release()
    waiting.join(5)
    assert not waiting.is_alive()
    reactor.drive_run(world.run_id)  # nobody waits now: it takes the lock itself
    assert gate.attempts == 2
