"""No Pod bills unseen (R5, R8) through the service layer on fakes: a Pod that never reports
within its boot deadline, or whose container RunPod says failed before training, is terminated
and its run fails with the reason the Pod's logs give; a trainer silent after it trained is
stopped and retained; a Pod RunPod stopped at the runtime limit (stopAfter) is reconciled."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from application import errors
from application.ports import POD_ERROR, POD_STOPPED
from application.run_settings import RunSettings
from application.services import Services, build_services
from application.watchdog import Silence
from domain.rates import running_disk_per_hour
from domain.run import Run
from projections.views.runs import apply_event, new_doc, present_run
from tests.builders import trial, upload_chats, volume
from tests.fakes import GOOD_KEY, FakeCompute, FakeObjectStore, FakeVault, FixedClock
from trainer.protocol import Progress, Status, status_key

DEADLINE_S, TICK_S, STALL_S = 25 * 60.0, 30.0, 600.0
PULL = "error pulling image: pull access denied for tensorant/trainer, repository does not exist"
CUDA = (
    "nvidia-container-cli: requirement error: unsatisfied condition: cuda>=13.0, please update "
    "your driver to a newer version"
)


@dataclass
class Stubborn(FakeCompute):
    """RunPod that answers terminations of some Pods with an error and keeps them."""

    kept: set[str] = field(default_factory=set)

    def terminate_pod(self, api_key: str, pod_id: str) -> None:
        if pod_id in self.kept:
            raise errors.ProviderError("Something went wrong. Please try again later.")
        super().terminate_pod(api_key, pod_id)


@dataclass
class World:
    app: Services
    compute: Stubborn
    objects: FakeObjectStore
    clock: FixedClock
    org: str
    run_id: str
    pod_id: str = ""
    launched_at: datetime | None = None

    def launch(self) -> str:
        self.app.runs.launch(self.org, self.run_id, "owner", True, "1.64")
        self.launched_at = self.clock.now()
        self.app.reactor.drive_run(self.run_id)
        self.pod_id = self.run().pod_id or ""
        assert self.run().state == "running" and self.pod_id
        return self.pod_id

    def run(self) -> Run:
        return self.app.log.run(self.org, self.run_id)

    def at(self, seconds_after_launch: float) -> None:
        assert self.launched_at is not None
        self.clock.t = self.launched_at + timedelta(seconds=seconds_after_launch)

    def events(self) -> list[Any]:
        return list(self.app.log.repository.event_store.get(self.run().id))

    def shown(self) -> dict[str, Any]:
        """The run as GET /v1/runs/{id} shows it now (the run view over its events)."""
        events = self.events()
        doc = new_doc(self.run_id, events[0])
        for event in events[1:]:
            apply_event(doc, event)
        return present_run(doc, self.clock.now())

    def logged(self) -> list[str]:
        reports: Any = self.app.trainer.reports
        return [text for _, text in reports.lines.get(self.run_id, [])]

    def report(self, phase: str = "training", step: int = 1) -> None:
        token = self.app.trainer.token(self.run_id)
        self.app.trainer.progress(self.run_id, token, phase, step=step, total_steps=10)


@pytest.fixture
def world(tmp_path: Path) -> World:
    compute, objects, clock = Stubborn(), FakeObjectStore(), FixedClock()
    app = build_services(
        {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "e.db")},
        compute=compute,
        objects=objects,
        vault=FakeVault(),
        clock=clock,
        settings=RunSettings(
            trainer_secret=b"k" * 32,
            max_termination_attempts=2,
            termination_backoff_s=1.0,
            boot_deadline_s=DEADLINE_S,
            reconcile_interval_s=TICK_S,
            stall_after_s=STALL_S,
            stop_after_grace_s=600.0,
        ),
        pod_logs=compute,
    )
    org = app.organizations.create("Acme")
    app.connections.connect(org, "owner", GOOD_KEY)
    app.storage.bind_volume(org, "owner", volume())
    project, _ = app.projects.create(org, "owner", "bot")
    dv = upload_chats(app, org, project, "owner")
    run_id, _ = app.runs.draft(org, "owner", trial(project, dv, max_runtime_minutes=60))
    return World(app, compute, objects, clock, org, run_id)


def life(run: Run) -> tuple[str, str | None, str]:
    return (run.state, run.state_reason, run.pod_status)


# ------------------------------------------------------------------ the boot deadline


@pytest.mark.parametrize(
    ("printed", "reason", "detail"),
    [
        (["pulling image tensorant/trainer:1.0", PULL, PULL], "image_unavailable", PULL),
        (["starting container", CUDA], "cuda_unavailable", CUDA),
        (
            ["starting container"],
            "trainer_never_started",
            "no report on any channel within 25 minutes of the Pod's creation",
        ),
    ],
)
def test_r5_a_pod_silent_until_its_boot_deadline_is_terminated_and_the_run_fails(
    world: World, printed: list[str], reason: str, detail: str
) -> None:
    pod = world.launch()
    world.compute.prints(pod, *printed)
    world.at(DEADLINE_S - TICK_S - 1)  # the last tick before the one that acts
    world.app.reactor.drive_run(world.run_id)
    assert life(world.run()) == ("running", None, "running")

    world.at(DEADLINE_S - TICK_S)  # the last tick before the deadline acts: no bill past it
    world.app.reactor.drive_run(world.run_id)
    world.app.reactor.drive_run(world.run_id)  # a duplicate message does nothing more
    assert life(world.run()) == ("failed", reason, "terminated")
    assert ("terminate", pod) in world.compute.calls and pod not in world.compute.pods
    kinds = [type(e).__name__ for e in world.events()]
    assert kinds[-4:] == ["BootFailed", "PodTerminationRequested", "PodTerminated", "RunFailed"]
    assert kinds.count("BootFailed") == 1
    failed = next(e for e in world.events() if type(e).__name__ == "BootFailed")
    assert (failed.reason, failed.detail) == (reason, detail)
    assert world.logged() == printed  # the Pod's last lines are in the run's log
    shown = world.shown()
    assert (shown["state"], shown["state_reason"]) == ("failed", reason)
    assert not any(shown["actions"].values())
    hourly = Decimal("1.64") + running_disk_per_hour(20, 0, world.clock.now())
    assert Decimal(shown["cost_so_far"]) <= hourly * Decimal(DEADLINE_S) / 3600


def test_r5_a_boot_report_keeps_the_pod_until_the_boot_goes_silent(world: World) -> None:
    pod = world.launch()
    reported = DEADLINE_S - 300  # a slow boot: its first line comes late, but in time
    world.at(reported)
    token = world.app.trainer.token(world.run_id)
    world.app.trainer.log_lines(world.run_id, token, [("b1", 1, world.clock.now(), "installing")])
    world.at(DEADLINE_S)
    world.app.reactor.drive_run(world.run_id)
    assert life(world.run()) == ("running", None, "running")  # it reported: not silent

    world.at(reported + STALL_S - 1)
    world.app.reactor.drive_run(world.run_id)
    assert life(world.run()) == ("running", None, "running")
    world.at(reported + STALL_S)  # a boot that reported, then said nothing for the stall time
    world.app.reactor.drive_run(world.run_id)
    assert life(world.run()) == ("failed", "trainer_never_started", "terminated")
    assert ("terminate", pod) in world.compute.calls


def test_r5_the_boot_s_progress_is_a_sign_of_life_not_the_start_of_training(
    world: World,
) -> None:
    """The public image's boot reports `installing`, the trainer `downloading_model` with the
    bytes done: the run is kept past the deadline while they come, but nothing
    is written yet, so a boot that then goes silent is terminated, never stopped and retained."""
    pod = world.launch()
    token = world.app.trainer.token(world.run_id)
    world.at(DEADLINE_S - 600)
    world.app.trainer.progress(world.run_id, token, "installing", step=0, total_steps=1)
    world.at(DEADLINE_S - 300)
    world.app.trainer.progress(
        world.run_id, token, "downloading_model", step=0, total_steps=0, bytes_done=7_000_000
    )
    assert not world.run().training_started
    world.at(DEADLINE_S)
    world.app.reactor.drive_run(world.run_id)
    assert life(world.run()) == ("running", None, "running")  # it reports: kept
    world.at(DEADLINE_S - 300 + STALL_S)  # then nothing for the stall time
    world.app.reactor.drive_run(world.run_id)
    assert life(world.run()) == ("failed", "trainer_never_started", "terminated")
    assert ("terminate", pod) in world.compute.calls and ("stop", pod) not in world.compute.calls


def test_r5_a_report_waiting_in_the_mailbox_counts_before_the_deadline_is_judged(
    world: World,
) -> None:
    world.launch()
    progress = Progress(
        boot="b1", seq=1, time="2026-11-01T12:01:00Z", phase="loading", step=0, total_steps=10
    )
    status = Status(
        run_id=world.run_id,
        progress=progress,
        updated_at=progress.time,
        last_activity_at=progress.time,
        attempt=1,
    )
    bucket = world.objects.buckets["vol1euro"]
    bucket[status_key(world.run_id)] = json.dumps(status.to_json()).encode()
    world.at(DEADLINE_S)
    world.app.reactor.drive_run(world.run_id)
    run = world.run()
    assert life(run) == ("running", None, "running") and run.training_started
    assert world.pod_id in world.compute.pods


def test_r5_a_pod_whose_termination_fails_stays_listed_until_runpod_lets_it_go(
    world: World,
) -> None:
    pod = world.launch()
    world.compute.kept.add(pod)
    world.at(DEADLINE_S)
    world.app.reactor.drive_run(world.run_id)
    assert life(world.run()) == ("releasing", "trainer_never_started", "terminating")
    for step in range(1, 4):
        world.at(DEADLINE_S + 10 * step)
        world.app.reactor.drive_run(world.run_id)
    assert life(world.run()) == ("releasing", "trainer_never_started", "needs_manual")
    world.compute.kept.clear()
    world.compute.terminate_pod(GOOD_KEY, pod)  # released by hand in RunPod's console
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])
    assert life(world.run()) == ("failed", "trainer_never_started", "terminated")


# ------------------------------------------------------------------ RunPod says ERROR


def test_r5_a_container_failed_before_training_fails_the_boot_at_once(world: World) -> None:
    pod = world.launch()
    world.compute.prints(pod, CUDA)
    world.compute.pods[pod] = replace(world.compute.pods[pod], status=POD_ERROR)
    world.at(90)  # long before the boot deadline
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])
    assert life(world.run()) == ("releasing", "cuda_unavailable", "terminating")
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])  # the next tick: same
    world.app.reactor.drive_run(world.run_id)
    assert life(world.run()) == ("failed", "cuda_unavailable", "terminated")
    assert [type(e).__name__ for e in world.events()].count("BootFailed") == 1
    assert world.logged() == [CUDA]


def test_r5_a_container_failed_after_training_started_is_a_crash_retained(world: World) -> None:
    pod = world.launch()
    world.report("training")
    world.compute.pods[pod] = replace(world.compute.pods[pod], status=POD_ERROR)
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])
    assert life(world.run()) == ("needs_recovery", "trainer_crashed", "stopped")
    assert ("terminate", pod) not in world.compute.calls


# ------------------------------------------------------------------ a trainer gone silent


def test_r8_a_trainer_silent_for_the_stall_time_after_training_is_stopped_and_retained(
    world: World,
) -> None:
    pod = world.launch()
    world.at(120)
    world.report("training", step=3)
    world.at(120 + STALL_S - 1)
    world.app.reactor.drive_run(world.run_id)
    assert life(world.run()) == ("running", None, "running")
    world.at(120 + STALL_S)
    world.app.reactor.drive_run(world.run_id)
    world.app.reactor.drive_run(world.run_id)
    assert life(world.run()) == ("needs_recovery", "trainer_stalled", "stopped")
    assert world.compute.pods[pod].status == POD_STOPPED
    assert [c for c in world.compute.calls if c[1] == pod] == [("launch", pod), ("stop", pod)]
    stalled = next(e for e in world.events() if type(e).__name__ == "TrainerStalled")
    assert stalled.last_report_at == world.launched_at + timedelta(seconds=120)
    assert {"resume", "release", "recover_verify"} <= {
        a for a, allowed in world.shown()["actions"].items() if allowed
    }


# ------------------------------------------------------------------ the runtime backstop


def test_r5_every_launch_asks_runpod_to_stop_the_pod_after_the_limit_and_a_grace(
    world: World,
) -> None:
    world.launch()
    (spec,) = world.compute.specs
    assert spec.stop_after == world.launched_at + timedelta(minutes=60 + 10)


def test_r5_a_pod_runpod_stopped_at_the_limit_while_no_worker_ran_is_reconciled(
    world: World,
) -> None:
    pod = world.launch()
    world.report("training")
    world.at(70 * 60)  # the workers were down; RunPod's stopAfter stopped the Pod
    world.compute.pods[pod] = replace(world.compute.pods[pod], status=POD_STOPPED)
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])
    assert life(world.run()) == ("needs_recovery", "runtime_limit", "stopped")
    kinds = [type(e).__name__ for e in world.events()]
    assert kinds[-2:] == ["RuntimeLimitReached", "PodStopped"]
    shown = world.shown()
    assert shown["stopped_storage_bills"] and shown["cleanup"]["pod_status"] == "stopped"


def test_r5_a_restarted_worker_drives_the_limit_before_it_compares(world: World) -> None:
    pod = world.launch()
    world.report("training")
    world.at(70 * 60)
    world.compute.pods[pod] = replace(world.compute.pods[pod], status=POD_STOPPED)
    world.app.reactor.drive_run(world.run_id)
    world.app.reconciler.compare_with_runpod(world.org, [world.run_id])
    assert life(world.run()) == ("needs_recovery", "runtime_limit", "stopped")
    assert [type(e).__name__ for e in world.events()].count("PodStopped") == 1


@pytest.mark.parametrize(
    ("interval_s", "acted_at_s"),
    [(TICK_S, DEADLINE_S - TICK_S), (DEADLINE_S * 3, DEADLINE_S / 2), (1e6, DEADLINE_S / 2)],
)
def test_the_boot_deadline_is_acted_on_a_tick_early_but_never_before_half_of_it(
    interval_s: float, acted_at_s: float
) -> None:
    """A Pod still pulling its image is not failed at once because ticks are rare."""
    settings = RunSettings(boot_deadline_s=DEADLINE_S, reconcile_interval_s=interval_s)
    assert Silence.of(settings).boot_deadline == timedelta(seconds=acted_at_s)
