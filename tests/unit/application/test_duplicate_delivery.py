"""R5, K2: every reaction given the same message twice produces the same events as once, and a
launch retried after the worker died between RunPod's answer and our save makes no second Pod."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest

from application.pods import pod_name
from application.services import Services
from tests.builders import adapter_zip
from tests.fakes import GOOD_KEY, FakeCompute, FakeObjectStore


def event_types(app: Services, run_id: str) -> list[str]:
    from uuid import UUID

    return [type(e).__name__ for e in app.log.repository.event_store.get(UUID(run_id))]


def stages(app: Services, objects: FakeObjectStore, org: str, run_id: str) -> list[Any]:
    """Each stage brings the run to where one reaction is due; the reaction is drive_run."""
    token = app.trainer.token(run_id)
    data = adapter_zip()

    def launch() -> None:
        app.runs.launch(org, run_id, "owner", True, "1.64")

    def export() -> None:
        objects.buckets["vol1euro"][f"runs/{run_id}/adapter.zip"] = data
        app.trainer.exported(
            run_id, token, f"runs/{run_id}/adapter.zip", hashlib.sha256(data).hexdigest(), len(data)
        )

    return [launch, export]


@pytest.mark.parametrize("stage_count", [1, 2])
def test_each_reaction_delivered_twice_produces_the_same_events_as_once(
    world: Any, tmp_path: Path, stage_count: int
) -> None:
    app, compute, objects, org, run_id = world
    for stage in stages(app, objects, org, run_id)[:stage_count]:
        stage()
        app.reactor.drive_run(run_id)
        once = event_types(app, run_id)
        pods_once = dict(compute.pods)
        calls_once = list(compute.calls)
        app.reactor.drive_run(run_id)  # the same message again
        assert event_types(app, run_id) == once
        assert compute.pods == pods_once and compute.calls == calls_once


def test_stop_and_recovery_reactions_are_idempotent(world: Any) -> None:
    app, compute, objects, org, run_id = world
    app.runs.launch(org, run_id, "owner", True, "1.64")
    app.reactor.drive_run(run_id)
    app.trainer.failed(run_id, app.trainer.token(run_id), "export_failed", "")
    app.trainer.failed(run_id, app.trainer.token(run_id), "export_failed", "")  # callback twice
    app.reactor.drive_run(run_id)
    once = event_types(app, run_id)
    app.reactor.drive_run(run_id)
    assert event_types(app, run_id) == once and once.count("PodStopped") == 1
    objects.buckets["vol1euro"][f"runs/{run_id}/adapter.zip"] = adapter_zip()
    app.runs.recover_from_volume(org, run_id, "owner")
    app.reactor.drive_run(run_id)
    done = event_types(app, run_id)
    app.reactor.drive_run(run_id)
    assert event_types(app, run_id) == done and done[-1] == "RunSucceeded"
    assert [c for c, _ in compute.calls] == ["launch", "stop", "terminate"]


class WorkerDied(BaseException):
    """Stands for SIGKILL: nothing after the kill point runs, no except clause catches it."""


def test_a_launch_retried_after_the_worker_died_before_our_save_makes_no_second_pod(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    app, compute, _, org, run_id = world
    app.runs.launch(org, run_id, "owner", True, "1.64")
    real_save = app.log.save_all

    def die_on_pod_launched(*aggregates: Any) -> int:
        if any(type(e).__name__ == "PodLaunched" for a in aggregates for e in a.pending_events):
            raise WorkerDied  # RunPod made the Pod; the worker dies before recording it
        return real_save(*aggregates)

    monkeypatch.setattr(app.log, "save_all", die_on_pod_launched)
    with pytest.raises(WorkerDied):
        app.reactor.drive_run(run_id)
    assert len(compute.pods) == 1 and app.log.run(org, run_id).pod_id is None
    monkeypatch.setattr(app.log, "save_all", real_save)
    app.reactor.drive_run(run_id)  # the broker redelivers the unacknowledged message
    run = app.log.run(org, run_id)
    assert len(compute.pods) == 1
    assert run.pod_id == next(iter(compute.pods)) and run.state == "running"
    assert compute.find_pod_by_name(GOOD_KEY, pod_name(run_id)) is not None
    assert [c for c, _ in compute.calls] == ["launch"]


def test_the_fake_runpod_creates_a_second_pod_of_one_name_when_asked() -> None:
    """As dumb as RunPod's create: the lookup before create is the service's (the test above
    fails when the service stops looking), never the fake's."""
    from application.ports import PodSpec

    c = FakeCompute()
    spec = PodSpec("tensorant-run-x", "img", "NVIDIA A100 80GB PCIe", 1, {})
    first, second = c.launch_pod(GOOD_KEY, spec), c.launch_pod(GOOD_KEY, spec)
    assert first.id != second.id and len(c.pods) == 2
    assert {p.name for p in c.pods.values()} == {"tensorant-run-x"}


def test_r5_a_same_named_pod_marked_for_another_run_is_not_adopted(world: Any) -> None:
    """The lookup adopts only a Pod of this run (or one without the marker)."""
    from application.ports import PodSpec

    app, compute, _, org, run_id = world
    theirs = compute.launch_pod(
        GOOD_KEY,
        PodSpec(pod_name(run_id), "img", "NVIDIA A100 80GB PCIe", 1, {"TENSORANT_RUN_ID": "x"}),
    )
    app.runs.launch(org, run_id, "owner", True, "1.64")
    app.reactor.drive_run(run_id)
    run = app.log.run(org, run_id)
    assert run.pod_id is not None and run.pod_id != theirs.id
    assert compute.pods[run.pod_id].run_id == run_id


def test_an_export_reported_before_the_pod_was_recorded_adopts_the_pod_then_verifies(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow or crashed launch: the trainer reports first; no second Pod, no lost report."""
    app, compute, objects, org, run_id = world
    app.runs.launch(org, run_id, "owner", True, "1.64")
    real_save = app.log.save_all

    def die_on_pod_launched(*aggregates: Any) -> int:
        if any(type(e).__name__ == "PodLaunched" for a in aggregates for e in a.pending_events):
            raise WorkerDied
        return real_save(*aggregates)

    monkeypatch.setattr(app.log, "save_all", die_on_pod_launched)
    with pytest.raises(WorkerDied):
        app.reactor.drive_run(run_id)
    monkeypatch.setattr(app.log, "save_all", real_save)
    data = adapter_zip()
    objects.buckets["vol1euro"][f"runs/{run_id}/adapter.zip"] = data
    app.trainer.exported(
        run_id,
        app.trainer.token(run_id),
        f"runs/{run_id}/adapter.zip",
        hashlib.sha256(data).hexdigest(),
        len(data),
    )
    assert app.log.run(org, run_id).state == "verifying"
    app.reactor.drive_run(run_id)
    assert app.log.run(org, run_id).state == "succeeded"
    assert compute.pods == {} and [c for c, _ in compute.calls] == ["launch", "terminate"]


def test_a_user_command_that_lost_a_race_with_the_worker_is_retried_not_refused(
    world: Any,
) -> None:
    """The worker saved the run first (optimistic concurrency): cancel reloads and succeeds."""
    from eventsourcing.persistence import IntegrityError

    app, _compute, _, org, run_id = world
    app.runs.launch(org, run_id, "owner", True, "1.64")
    app.reactor.drive_run(run_id)
    real_save = app.log.save_all
    conflicts = []

    def worker_saved_first(*aggregates: Any) -> int:
        if not conflicts:
            conflicts.append(1)
            app.trainer.progress(run_id, app.trainer.token(run_id), "training")  # the race
            raise IntegrityError("version conflict")
        return real_save(*aggregates)

    app.log.save_all = worker_saved_first  # type: ignore[method-assign]
    try:
        app.runs.cancel(org, run_id, "owner")
    finally:
        app.log.save_all = real_save  # type: ignore[method-assign]
    assert conflicts == [1]
    assert app.log.run(org, run_id).state == "cancelling"
    assert "TrainingStarted" in event_types(app, run_id)
