"""The run state machine command by command (R1–R13, K2, K3): each command's exact events
(actor, time, payload), the state it leaves, and each refusal's type, detail and state, which the
API shows as problem+json. Written to kill the mutants of domain/run.py (docs/mutation.md)."""

from __future__ import annotations

import copy
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from domain.errors import Conflict, IllegalTransition
from domain.gpus import NotEnoughGpuMemory
from domain.run import NotADraft, Run, UnverifiedRelease
from tests.builders import small_trial

CONFIG = small_trial(max_runtime_minutes=45)
T0 = datetime(2026, 11, 1, tzinfo=UTC)
USER, SYS = "alice", "system"
SHA, SHA2 = "a" * 64, "b" * 64
PRICE, QUOTE, POD_PRICE = Decimal("0.55"), Decimal("0.50"), Decimal("0.44")


def at(minute: int) -> datetime:
    return T0 + timedelta(minutes=minute)


def fields(event: Any) -> dict[str, Any]:
    hidden = ("originator_id", "originator_version", "originator_topic")
    return {k: v for k, v in vars(event).items() if k not in hidden}


def state_of(run: Run) -> dict[str, Any]:
    return {k: v for k, v in vars(run).items() if not k.startswith("_")}


def step(run: Run, call: Callable[[], None]) -> list[tuple[str, dict[str, Any]]]:
    """Run one command; return the events it emitted, each as (class name, fields)."""
    n = len(run.pending_events)
    call()
    return [(type(e).__name__, fields(e)) for e in run.pending_events[n:]]


def refused(
    run: Run, call: Callable[[], None], problem: type[Conflict], detail: str, **extra: Any
) -> None:
    """The command is refused with exactly this problem and detail, and nothing changes."""
    before, n = copy.deepcopy(state_of(run)), len(run.pending_events)
    with pytest.raises(problem) as info:
        call()
    assert type(info.value) is problem
    assert (info.value.detail, info.value.extra) == (detail, extra)
    assert str(info.value) == detail
    assert state_of(run) == before
    assert len(run.pending_events) == n


def not_in(run: Run, action: str) -> Callable[[Callable[[], None]], None]:
    def check(call: Callable[[], None]) -> None:
        refused(
            run,
            call,
            IllegalTransition,
            f"cannot {action} a run that is {run.state}",
            state=run.state,
        )

    return check


def no_change(run: Run, call: Callable[[], None]) -> None:
    before = copy.deepcopy(state_of(run))
    assert step(run, call) == []
    assert state_of(run) == before


# ------------------------------------------------------------ paths to each state
def drafted() -> Run:
    return Run.draft("org-1", CONFIG, USER, at(0))


def launching() -> Run:
    run = drafted()
    run.confirm_launch(PRICE, QUOTE, "EU-RO-1", USER, at(1))
    return run


def running() -> Run:
    run = launching()
    run.record_pod_launched("pod1", "tensorant-run-1", POD_PRICE, None, "host1", 20, 0, SYS, at(2))
    return run


def verifying() -> Run:
    run = running()
    run.record_adapter_exported("runs/1/adapter.zip", SHA, 100, SYS, at(3))
    return run


def verifying_without_pod() -> Run:
    """The trainer reported before the worker recorded the Pod."""
    run = launching()
    run.record_adapter_exported("runs/1/adapter.zip", SHA, 100, SYS, at(3))
    return run


def needs_recovery() -> Run:
    run = running()
    run.record_export_failed("export_failed", "upload failed", SYS, at(3))
    run.record_pod_stopped("export_failed", SYS, at(4))
    return run


def recovering() -> Run:
    run = needs_recovery()
    run.request_recovery("volume", "runs/1/adapter.zip", None, None, USER, at(5))
    return run


def releasing() -> Run:
    run = verifying()
    run.record_adapter_verified("runs/1/adapter.zip", SHA, 100, SYS, at(4))
    return run


def succeeded() -> Run:
    run = releasing()
    run.record_pod_terminated(SYS, at(5))
    return run


def cancelled_with_stopped_pod() -> Run:
    run = needs_recovery()
    run.cancel(USER, at(5))
    return run


def cancelled_with_running_pod() -> Run:
    run = cancelled_with_stopped_pod()
    run.record_pod_resumed(Decimal("0.70"), None, USER, at(6))
    return run


# ------------------------------------------------------------ drafts (R1, R3)
def test_r1_a_draft_starts_with_nothing_but_its_organization_and_config() -> None:
    run = Run.draft("org-1", CONFIG, USER, at(0))
    [(name, event)] = [(type(e).__name__, fields(e)) for e in run.pending_events]
    assert name == "RunDrafted"
    assert event == {
        "timestamp": at(0),
        "actor": USER,
        "org_id": "org-1",
        "config": CONFIG.validated().as_dict(),
    }
    assert state_of(run) == {
        "org_id": "org-1",
        "config": CONFIG.validated(),
        "history": ["draft"],
        "state": "draft",
        "state_reason": None,
        "accepted_price": None,
        "price_per_hour": None,
        "pod_id": None,
        "pod_name": None,
        "pod_host_id": None,
        "base_model_revision": None,
        "pod_status": "none",
        "datacenter_id": None,
        "started_at": None,
        "ended_at": None,
        "training_started": False,
        "started_by": None,
        "stop_reason": None,
        "termination_intent": None,
        "last_error": None,
        "termination_attempts": 0,
        "exported": None,
        "refused_export": None,
        "adapter": None,
    }
    assert not run.live_pod and not run.stop_pending


def test_r2_the_memory_a_storage_model_needs_is_checked_on_draft_and_update() -> None:
    with pytest.raises(NotEnoughGpuMemory):
        Run.draft("org-1", CONFIG, USER, at(0), need_gb=200)
    run = drafted()
    with pytest.raises(NotEnoughGpuMemory):
        run.update_draft(CONFIG, USER, at(1), need_gb=200)
    assert run.config == CONFIG.validated()


def test_r3_a_draft_is_updated_and_discarded_by_its_actor() -> None:
    run = drafted()
    run.ensure_editable()
    changed = small_trial(max_runtime_minutes=21, price_limit_per_hour=Decimal("0.90"))
    assert step(run, lambda: run.update_draft(changed, USER, at(1))) == [
        ("RunDraftUpdated", {"timestamp": at(1), "actor": USER, "config": changed.as_dict()})
    ]
    assert run.config == changed.validated()
    assert step(run, lambda: run.discard("bob", at(2))) == [
        ("RunDiscarded", {"timestamp": at(2), "actor": "bob"})
    ]
    assert (run.state, run.history, run.ended_at) == ("discarded", ["draft", "discarded"], None)


def test_r3_after_launch_a_run_can_no_longer_be_edited_launched_or_deleted() -> None:
    run = launching()
    refuse = not_in(run, "edit")
    refuse(run.ensure_editable)
    refuse(lambda: run.update_draft(CONFIG, USER, at(2)))
    not_in(run, "delete")(lambda: run.discard(USER, at(2)))
    not_in(run, "reject a launch of")(lambda: run.reject_launch("x", "", USER, at(2)))
    detail = "cannot launch a run that is launching"
    refused(run, run.ensure_launchable, NotADraft, detail, state="launching")
    refused(
        run,
        lambda: run.confirm_launch(PRICE, QUOTE, "EU-RO-1", USER, at(2)),
        NotADraft,
        detail,
        state="launching",
    )


# ------------------------------------------------------------ launch (R4, R5)
def test_r4_a_confirmed_launch_records_the_accepted_price_and_datacenter() -> None:
    run = drafted()
    run.ensure_launchable()
    assert step(run, lambda: run.confirm_launch(PRICE, QUOTE, "EU-RO-1", USER, at(1))) == [
        (
            "LaunchConfirmed",
            {
                "timestamp": at(1),
                "actor": USER,
                "accepted_price": PRICE,
                "quoted_price": QUOTE,
                "datacenter_id": "EU-RO-1",
            },
        )
    ]
    assert (run.state, run.history) == ("launching", ["draft", "launching"])
    assert (run.accepted_price, run.datacenter_id, run.state_reason) == (PRICE, "EU-RO-1", None)


def test_r4_a_rejected_launch_keeps_the_draft_with_the_reason() -> None:
    run = drafted()
    assert step(run, lambda: run.reject_launch("price-changed", "now 0.61", USER, at(1))) == [
        (
            "LaunchRejected",
            {"timestamp": at(1), "actor": USER, "reason": "price-changed", "detail": "now 0.61"},
        )
    ]
    assert (run.state, run.state_reason, run.history) == ("draft", "price-changed", ["draft"])


def test_r5_a_recorded_pod_starts_the_run_and_its_clock() -> None:
    run = launching()
    events = step(
        run,
        lambda: run.record_pod_launched(
            "pod1",
            "tensorant-run-1",
            POD_PRICE,
            "EU-SE-1",
            "host1",
            20,
            30,
            SYS,
            at(2),
            image="runpod/pytorch:cu13",
            trainer_version="b1",
            base_model_revision="c" * 40,
        ),
    )
    assert events == [
        (
            "PodLaunched",
            {
                "timestamp": at(2),
                "actor": SYS,
                "pod_id": "pod1",
                "pod_name": "tensorant-run-1",
                "cost_per_hour": POD_PRICE,
                "datacenter_id": "EU-SE-1",
                "pod_host_id": "host1",
                "container_disk_gb": 20,
                "volume_gb": 30,
                "image": "runpod/pytorch:cu13",  # R19 lineage
                "trainer_version": "b1",
                "base_model_revision": "c" * 40,  # the Hub commit pinned at launch
            },
        )
    ]
    assert (run.state, run.history) == ("running", ["draft", "launching", "running"])
    assert (run.pod_id, run.pod_name, run.pod_status) == ("pod1", "tensorant-run-1", "running")
    assert run.base_model_revision == "c" * 40
    assert (run.price_per_hour, run.datacenter_id, run.pod_host_id) == (
        POD_PRICE,
        "EU-SE-1",
        "host1",
    )
    assert run.started_at == at(2)
    assert run.live_pod and not run.stop_pending


def test_r5_a_pod_without_a_datacenter_keeps_the_confirmed_one() -> None:
    run = running()
    assert (run.datacenter_id, run.pod_host_id, run.started_at) == ("EU-RO-1", "host1", at(2))


def test_r5_one_launch_is_one_pod() -> None:
    run = running()
    no_change(
        run,
        lambda: run.record_pod_launched("pod1", "n", POD_PRICE, None, None, 20, 0, SYS, at(3)),
    )
    refused(
        run,
        lambda: run.record_pod_launched("pod2", "n", POD_PRICE, None, None, 20, 0, SYS, at(3)),
        IllegalTransition,
        "run already has Pod pod1; one launch = one Pod",
    )
    draft = drafted()
    not_in(draft, "record a Pod for")(
        lambda: draft.record_pod_launched("pod1", "n", POD_PRICE, None, None, 20, 0, SYS, at(3))
    )


def test_r5_a_pod_recorded_after_a_cancel_is_terminated_at_once() -> None:
    run = launching()
    run.cancel(USER, at(2))
    assert (run.state, run.pod_status, run.state_reason) == ("cancelling", "none", "user_cancelled")
    run.record_pod_launched("pod1", "n", POD_PRICE, None, None, 20, 0, SYS, at(3))
    assert (run.state, run.pod_status, run.pod_id) == ("cancelling", "terminating", "pod1")
    assert run.history == ["draft", "launching", "cancelling"]


def test_r5_a_pod_recorded_after_the_trainer_reported_keeps_the_run_verifying() -> None:
    run = verifying_without_pod()
    assert (run.state, run.pod_status, run.started_at) == ("verifying", "none", None)
    run.record_pod_launched("pod1", "n", POD_PRICE, None, None, 20, 0, SYS, at(4))
    assert (run.state, run.pod_status, run.started_at) == ("verifying", "running", at(4))
    assert run.history == ["draft", "launching", "verifying"]


def test_r5_a_failed_launch_fails_the_run_or_completes_its_cancel() -> None:
    run = launching()
    assert step(run, lambda: run.launch_failed("capacity", "no 4090 left", SYS, at(2))) == [
        (
            "RunFailed",
            {"timestamp": at(2), "actor": SYS, "reason": "capacity", "detail": "no 4090 left"},
        )
    ]
    assert (run.state, run.state_reason, run.ended_at) == ("failed", "capacity", at(2))
    run = launching()
    run.cancel(USER, at(2))
    assert step(run, lambda: run.launch_failed("capacity", "", SYS, at(3))) == [
        ("RunCancelled", {"timestamp": at(3), "actor": SYS, "reason": "user_cancelled"})
    ]
    assert (run.state, run.state_reason, run.ended_at) == ("cancelled", "user_cancelled", at(3))


def test_r5_a_launch_whose_pod_exists_cannot_be_failed() -> None:
    run = running()
    not_in(run, "fail the launch of")(lambda: run.launch_failed("capacity", "", SYS, at(3)))
    run.cancel(USER, at(3))
    refused(
        run,
        lambda: run.launch_failed("capacity", "", SYS, at(4)),
        IllegalTransition,
        "the Pod exists; it must be released, not forgotten",
    )


# ------------------------------------------------------------ training (R6–R8)
def test_r6_training_starts_once_and_only_while_running() -> None:
    run = launching()
    no_change(run, lambda: run.start_training(SYS, at(2)))
    run = running()
    assert step(run, lambda: run.start_training(SYS, at(3))) == [
        ("TrainingStarted", {"timestamp": at(3), "actor": SYS, "report": None})
    ]
    assert (run.training_started, run.started_by) == (True, None)
    no_change(run, lambda: run.start_training(SYS, at(4)))


def test_r6_training_started_by_a_report_keeps_it_and_no_later_one_replaces_it() -> None:
    """The report that starts training is kept in its event: its save is that report's claim
    (`TrainerCallbacks.apply`), so a copy of it is known by the run."""
    first = {"boot": "b1", "seq": 2, "via": "callback", "step": 1, "received_at": "t"}
    run = running()
    assert step(run, lambda: run.start_training(SYS, at(3), report=first)) == [
        ("TrainingStarted", {"timestamp": at(3), "actor": SYS, "report": first})
    ]
    assert run.started_by == first
    no_change(run, lambda: run.start_training(SYS, at(4), report={**first, "seq": 3}))
    assert run.started_by == first


def test_r6_export_starts_only_while_running() -> None:
    run = launching()
    no_change(run, lambda: run.start_export(SYS, at(2)))
    run = running()
    assert step(run, lambda: run.start_export(SYS, at(3))) == [
        ("ExportStarted", {"timestamp": at(3), "actor": SYS})
    ]
    assert (run.state, run.history[-1]) == ("exporting", "exporting")
    no_change(run, lambda: run.start_export(SYS, at(4)))
    no_change(run, lambda: run.start_training(SYS, at(4)))


@pytest.mark.parametrize("export_first", [False, True])
def test_r7_an_exported_adapter_is_verified_next(export_first: bool) -> None:
    run = running()
    if export_first:
        run.start_export(SYS, at(3))
    assert step(run, lambda: run.record_adapter_exported("k/a.zip", SHA, 123, SYS, at(4))) == [
        (
            "AdapterExported",
            {
                "timestamp": at(4),
                "actor": SYS,
                "object_key": "k/a.zip",
                "sha256": SHA,
                "size_bytes": 123,
            },
        )
    ]
    assert run.state == "verifying"
    assert run.exported == {"object_key": "k/a.zip", "sha256": SHA, "size_bytes": 123}
    no_change(run, lambda: run.record_adapter_exported("k/a.zip", SHA, 123, SYS, at(5)))
    not_in(run, "export an adapter for")(
        lambda: run.record_adapter_exported("k/a.zip", SHA2, 123, SYS, at(5))
    )
    draft = drafted()
    not_in(draft, "export an adapter for")(
        lambda: draft.record_adapter_exported("k/a.zip", SHA, 123, SYS, at(5))
    )


def test_r8_a_failed_export_asks_for_a_stop_once() -> None:
    run = running()
    assert step(run, lambda: run.record_export_failed("", "upload failed", SYS, at(3))) == [
        (
            "ExportFailed",
            {
                "timestamp": at(3),
                "actor": SYS,
                "reason": "export_failed",
                "detail": "upload failed",
            },
        )
    ]
    assert (run.state, run.state_reason, run.stop_reason) == (
        "running",
        "export_failed",
        "export_failed",
    )
    assert run.stop_pending
    no_change(run, lambda: run.record_export_failed("trainer_crashed", "", SYS, at(4)))
    no_change(run, lambda: run.reach_runtime_limit(SYS, at(4)))


def test_r8_a_failed_export_keeps_the_reason_it_was_given() -> None:
    run = launching()
    events = step(run, lambda: run.record_export_failed("trainer_crashed", "oom", SYS, at(2)))
    assert [e["reason"] for _, e in events] == ["trainer_crashed"]
    assert (run.state, run.stop_reason, run.state_reason) == (
        "launching",
        "export_failed",
        "export_failed",
    )
    no_change(run, lambda: run.record_export_failed("trainer_crashed", "", SYS, at(3)))
    # the stop was decided but a launching run has no limit to reach
    not_in(run, "stop at the runtime limit")(lambda: run.reach_runtime_limit(SYS, at(3)))


def test_r8_an_export_that_fails_while_exporting_asks_for_a_stop() -> None:
    run = running()
    run.start_export(SYS, at(3))
    run.record_export_failed("export_failed", "upload failed", SYS, at(4))
    assert (run.state, run.stop_reason, run.stop_pending) == ("exporting", "export_failed", True)


def test_r8_an_export_failure_is_refused_outside_training() -> None:
    run = drafted()
    not_in(run, "fail the export of")(lambda: run.record_export_failed("", "", SYS, at(1)))
    run = verifying()
    run.record_verification_failed("adapter_not_zip", "", SYS, at(4))
    assert run.stop_reason == "adapter_not_zip"
    not_in(run, "fail the export of")(lambda: run.record_export_failed("", "", SYS, at(5)))


def test_r8_the_runtime_limit_asks_for_a_stop_once() -> None:
    run = running()
    assert step(run, lambda: run.reach_runtime_limit(SYS, at(3))) == [
        ("RuntimeLimitReached", {"timestamp": at(3), "actor": SYS})
    ]
    assert (run.state, run.state_reason, run.stop_reason) == (
        "running",
        "runtime_limit",
        "runtime_limit",
    )
    assert run.stop_pending
    no_change(run, lambda: run.reach_runtime_limit(SYS, at(4)))
    no_change(run, lambda: run.record_export_failed("", "", SYS, at(4)))
    run = verifying()
    run.reach_runtime_limit(SYS, at(4))
    assert (run.state, run.stop_reason) == ("verifying", "runtime_limit")
    no_change(run, lambda: run.reach_runtime_limit(SYS, at(5)))
    run = launching()
    not_in(run, "stop at the runtime limit")(lambda: run.reach_runtime_limit(SYS, at(2)))
    run = running()
    run.start_export(SYS, at(3))
    run.reach_runtime_limit(SYS, at(4))
    assert (run.state, run.stop_reason, run.stop_pending) == ("exporting", "runtime_limit", True)


def test_r8_the_runtime_limit_is_due_exactly_after_max_runtime_minutes() -> None:
    limit = timedelta(minutes=45)
    assert not drafted().runtime_limit_due(at(100))
    assert not launching().runtime_limit_due(at(100))
    run = running()
    assert not run.runtime_limit_due(at(2) + limit - timedelta(seconds=1))
    assert run.runtime_limit_due(at(2) + limit)
    run.start_export(SYS, at(3))
    assert run.runtime_limit_due(at(2) + limit)
    run = verifying()
    assert not run.runtime_limit_due(at(2) + limit - timedelta(seconds=1))
    assert run.runtime_limit_due(at(2) + limit)
    assert not verifying_without_pod().runtime_limit_due(at(100))
    assert not needs_recovery().runtime_limit_due(at(100))


# ------------------------------------------------------------ verification (R7, R9, R10)
def test_r7_a_verified_adapter_asks_to_release_the_pod() -> None:
    run = verifying()
    events = step(
        run, lambda: run.record_adapter_verified("runs/1/adapter.zip", SHA, 100, SYS, at(4))
    )
    assert events == [
        (
            "AdapterVerified",
            {
                "timestamp": at(4),
                "actor": SYS,
                "object_key": "runs/1/adapter.zip",
                "sha256": SHA,
                "size_bytes": 100,
                "training": None,  # R17: the adapter had no record of its training
            },
        ),
        ("PodTerminationRequested", {"timestamp": at(4), "actor": SYS, "intent": "release"}),
    ]
    assert run.adapter == {
        "object_key": "runs/1/adapter.zip",
        "sha256": SHA,
        "size_bytes": 100,
        "verified_at": at(4),
    }
    assert (run.state, run.pod_status, run.termination_intent) == (
        "releasing",
        "terminating",
        "release",
    )
    assert run.history == ["draft", "launching", "running", "verifying", "releasing", "releasing"]
    assert run.live_pod and not run.stop_pending


def test_r7_a_verified_adapter_without_a_pod_succeeds_at_once() -> None:
    run = verifying_without_pod()
    events = step(run, lambda: run.record_adapter_verified("k", SHA, 100, SYS, at(4)))
    assert [name for name, _ in events] == ["AdapterVerified", "RunSucceeded"]
    assert events[1][1] == {"timestamp": at(4), "actor": SYS}
    assert (run.state, run.ended_at, run.pod_status) == ("succeeded", at(4), "none")


def test_r7_verification_is_refused_outside_verifying_and_recovering() -> None:
    run = running()
    not_in(run, "verify the adapter of")(
        lambda: run.record_adapter_verified("k", SHA, 1, SYS, at(3))
    )
    not_in(run, "fail the verification of")(
        lambda: run.record_verification_failed("adapter_not_zip", "", SYS, at(3))
    )


def test_r7_an_invalid_adapter_on_a_running_pod_asks_for_a_stop_with_its_code() -> None:
    run = verifying()
    events = step(
        run, lambda: run.record_verification_failed("adapter_not_zip", "bad magic", SYS, at(4))
    )
    assert events == [
        (
            "AdapterVerificationFailed",
            {"timestamp": at(4), "actor": SYS, "reason": "adapter_not_zip", "detail": "bad magic"},
        )
    ]
    assert (run.state, run.state_reason, run.stop_reason) == (
        "verifying",
        "adapter_not_zip",
        "adapter_not_zip",
    )
    assert run.stop_pending
    run.record_pod_stopped("adapter_not_zip", SYS, at(5))
    assert (run.state, run.state_reason, run.stop_reason, run.pod_status) == (
        "needs_recovery",
        "adapter_not_zip",
        None,
        "stopped",
    )


def test_r7_an_invalid_adapter_without_a_code_is_adapter_invalid() -> None:
    run = verifying()
    run.record_verification_failed("", "", SYS, at(4))
    assert (run.state_reason, run.stop_reason) == ("adapter_invalid", "adapter_invalid")
    run = verifying_without_pod()
    run.record_verification_failed("", "", SYS, at(4))
    assert (run.state, run.state_reason, run.stop_reason) == (
        "needs_recovery",
        "adapter_invalid",
        None,
    )


def test_r9_a_failed_recovery_needs_recovery_again_with_the_defect() -> None:
    run = recovering()
    run.record_verification_failed("adapter_wrong_base_model", "", SYS, at(6))
    assert (run.state, run.state_reason, run.stop_reason, run.pod_status) == (
        "needs_recovery",
        "adapter_wrong_base_model",
        None,
        "stopped",
    )


def test_r9_a_recovery_is_requested_for_a_stopped_or_resumed_pod() -> None:
    run = needs_recovery()
    run.ensure_recoverable()
    events = step(run, lambda: run.request_recovery("upload", "up/a.zip", SHA, 77, USER, at(5)))
    assert events == [
        (
            "RecoveryRequested",
            {
                "timestamp": at(5),
                "actor": USER,
                "method": "upload",
                "object_key": "up/a.zip",
                "sha256": SHA,
                "size_bytes": 77,
            },
        )
    ]
    assert (run.state, run.state_reason) == ("recovering", "export_failed")
    run = needs_recovery()
    run.record_pod_resumed(Decimal("0.70"), None, USER, at(5))
    run.request_recovery("volume", "k", None, None, USER, at(6))
    assert run.state == "recovering"
    run.record_adapter_verified("k", SHA, 1, SYS, at(7))
    assert (run.state, run.pod_status) == ("releasing", "terminating")


def test_r9_recovery_is_refused_when_the_pod_is_gone_or_outside_needs_recovery() -> None:
    run = verifying_without_pod()
    run.record_verification_failed("adapter_not_zip", "", SYS, at(4))
    refused(
        run,
        lambda: run.request_recovery("volume", "k", None, None, USER, at(5)),
        IllegalTransition,
        "the Pod holding the adapter is gone",
    )
    run = running()
    not_in(run, "recover")(run.ensure_recoverable)
    not_in(run, "recover")(lambda: run.request_recovery("volume", "k", None, None, USER, at(3)))


def test_r10_a_recovered_adapter_releases_the_stopped_pod() -> None:
    run = recovering()
    events = step(run, lambda: run.record_adapter_verified("k", SHA, 1, SYS, at(6)))
    assert [name for name, _ in events] == ["AdapterVerified", "PodTerminationRequested"]
    # a verified adapter clears the reason the run needed recovery
    assert (run.state, run.pod_status, run.state_reason) == ("releasing", "terminating", None)
    run.record_pod_terminated(SYS, at(7))
    assert (run.state, run.ended_at) == ("succeeded", at(7))


# ------------------------------------------------------------ stop and retain (R8, R11)
def test_r8_a_stop_is_recorded_once_and_only_for_a_running_pod() -> None:
    run = running()
    run.record_export_failed("export_failed", "", SYS, at(3))
    assert step(run, lambda: run.record_pod_stopped("export_failed", SYS, at(4))) == [
        ("PodStopped", {"timestamp": at(4), "actor": SYS, "reason": "export_failed"})
    ]
    assert run.history[-1] == "needs_recovery"
    assert not run.stop_pending and run.live_pod
    no_change(run, lambda: run.record_pod_stopped("export_failed", SYS, at(5)))
    draft = drafted()
    refused(
        draft,
        lambda: draft.record_pod_stopped("x", SYS, at(1)),
        IllegalTransition,
        "the Pod is none, not running",
    )


def test_r8_a_pod_stopped_while_launching_or_exporting_needs_recovery() -> None:
    run = running()
    run.start_export(SYS, at(3))
    run.record_pod_stopped("runtime_limit", SYS, at(4))
    assert (run.state, run.state_reason) == ("needs_recovery", "runtime_limit")


def test_r11_a_stopped_pod_of_a_finished_run_stays_finished() -> None:
    run = cancelled_with_running_pod()
    assert (run.state, run.pod_status, run.price_per_hour) == (
        "cancelled",
        "running",
        Decimal("0.70"),
    )
    assert not run.stop_pending
    history = list(run.history)
    run.record_pod_stopped("user", SYS, at(7))
    assert (run.state, run.state_reason, run.pod_status, run.history) == (
        "cancelled",
        "user_cancelled",
        "stopped",
        history,
    )


def test_r11_a_stopped_pod_resumes_at_the_new_price() -> None:
    run = needs_recovery()
    run.ensure_resumable()
    events = step(run, lambda: run.record_pod_resumed(Decimal("0.70"), "host2", USER, at(5)))
    assert events == [
        (
            "PodResumed",
            {
                "timestamp": at(5),
                "actor": USER,
                "cost_per_hour": Decimal("0.70"),
                "pod_host_id": "host2",
            },
        )
    ]
    assert (run.pod_status, run.price_per_hour, run.pod_host_id, run.state) == (
        "running",
        Decimal("0.70"),
        "host2",
        "needs_recovery",
    )
    assert not run.stop_pending
    no_change(run, lambda: run.record_pod_resumed(Decimal("0.90"), None, USER, at(6)))
    run = needs_recovery()
    run.record_pod_resumed(Decimal("0.70"), None, USER, at(5))
    assert run.pod_host_id == "host1"


def test_r11_only_a_stopped_pod_of_a_stopped_run_resumes() -> None:
    run = drafted()
    not_in(run, "resume the Pod of")(run.ensure_resumable)
    not_in(run, "resume the Pod of")(lambda: run.record_pod_resumed(PRICE, None, USER, at(1)))
    run = verifying_without_pod()
    run.record_verification_failed("adapter_not_zip", "", SYS, at(4))
    for call in (
        run.ensure_resumable,
        lambda: run.record_pod_resumed(PRICE, None, USER, at(5)),
    ):
        refused(run, call, IllegalTransition, "the Pod is none; only a stopped Pod resumes")
    run = cancelled_with_stopped_pod()
    run.record_pod_vanished(SYS, at(6))
    refused(
        run,
        lambda: run.record_pod_resumed(PRICE, None, USER, at(7)),
        IllegalTransition,
        "the Pod is gone; only a stopped Pod resumes",
    )


def test_r11_a_failed_run_can_resume_its_stopped_pod() -> None:
    run = needs_recovery()
    run.request_release(True, USER, at(5))
    run = recovering()
    run.cancel(USER, at(6))
    run.ensure_resumable()
    run.record_pod_resumed(PRICE, None, USER, at(7))
    assert (run.state, run.pod_status) == ("cancelled", "running")


# ------------------------------------------------------------ release and cancel (R12, R13)
def test_r13_releasing_an_unverified_pod_needs_explicit_confirmation() -> None:
    run = needs_recovery()
    refused(
        run,
        lambda: run.request_release(False, USER, at(5)),
        UnverifiedRelease,
        "the adapter of this run is not verified: releasing the Pod deletes the only copy of "
        "its files; confirm with confirm_delete_unverified: true",
    )
    assert step(run, lambda: run.request_release(True, USER, at(5))) == [
        ("PodTerminationRequested", {"timestamp": at(5), "actor": USER, "intent": "release"})
    ]
    assert (run.state, run.state_reason, run.pod_status, run.termination_intent) == (
        "releasing",
        "export_failed",
        "terminating",
        "release",
    )
    no_change(run, lambda: run.request_release(True, USER, at(6)))
    assert step(run, lambda: run.record_pod_terminated(SYS, at(6))) == [
        ("PodTerminated", {"timestamp": at(6), "actor": SYS, "pod_id": "pod1"}),
        (
            "RunFailed",
            {
                "timestamp": at(6),
                "actor": SYS,
                "reason": "released_unverified",
                "detail": "the Pod was released without a verified adapter",
            },
        ),
    ]
    assert (run.state, run.state_reason, run.pod_status, run.ended_at) == (
        "failed",
        "released_unverified",
        "terminated",
        at(6),
    )


def test_r13_a_release_needs_a_pod_and_a_stopped_or_finished_run() -> None:
    run = drafted()
    refused(
        run,
        lambda: run.request_release(True, USER, at(1)),
        IllegalTransition,
        "there is no Pod to release (Pod is none)",
    )
    run = running()
    not_in(run, "release the Pod of")(lambda: run.request_release(True, USER, at(3)))


def test_r13_releasing_the_pod_of_a_cancelled_run_keeps_it_cancelled() -> None:
    run = cancelled_with_stopped_pod()
    history = list(run.history)
    assert step(run, lambda: run.request_release(True, USER, at(6))) == [
        ("PodTerminationRequested", {"timestamp": at(6), "actor": USER, "intent": "release"})
    ]
    assert (run.state, run.pod_status, run.termination_intent, run.history) == (
        "cancelled",
        "terminating",
        "release",
        history,
    )
    assert [n for n, _ in step(run, lambda: run.record_pod_terminated(SYS, at(7)))] == [
        "PodTerminated"
    ]
    assert (run.state, run.ended_at) == ("cancelled", at(5))


def test_r12_cancelling_a_draft_or_a_stopped_run_cancels_at_once() -> None:
    for run, pod_status in ((drafted(), "none"), (needs_recovery(), "stopped")):
        assert step(run, lambda r=run: r.cancel(USER, at(5))) == [
            ("RunCancelled", {"timestamp": at(5), "actor": USER, "reason": "user_cancelled"})
        ]
        assert (run.state, run.state_reason, run.pod_status, run.ended_at) == (
            "cancelled",
            "user_cancelled",
            pod_status,
            at(5),
        )
    run = recovering()
    run.cancel(USER, at(6))
    assert (run.state, run.pod_status) == ("cancelled", "stopped")


@pytest.mark.parametrize("setup", [running, verifying])
def test_r12_cancelling_a_run_with_a_running_pod_terminates_it(setup: Callable[[], Run]) -> None:
    run = setup()
    assert step(run, lambda: run.cancel(USER, at(5))) == [
        ("PodTerminationRequested", {"timestamp": at(5), "actor": USER, "intent": "cancel"})
    ]
    assert (run.state, run.state_reason, run.pod_status, run.termination_intent) == (
        "cancelling",
        "user_cancelled",
        "terminating",
        "cancel",
    )
    no_change(run, lambda: run.cancel(USER, at(6)))
    assert step(run, lambda: run.record_pod_terminated(SYS, at(7))) == [
        ("PodTerminated", {"timestamp": at(7), "actor": SYS, "pod_id": "pod1"}),
        ("RunCancelled", {"timestamp": at(7), "actor": SYS, "reason": "user_cancelled"}),
    ]
    assert (run.state, run.pod_status, run.ended_at) == ("cancelled", "terminated", at(7))


def test_r12_a_finished_or_releasing_run_cannot_be_cancelled() -> None:
    run = releasing()
    refused(
        run, lambda: run.cancel(USER, at(5)), IllegalTransition, "the Pod is already being released"
    )
    for run in (succeeded(), cancelled_with_stopped_pod()):
        refused(
            run,
            lambda r=run: r.cancel(USER, at(9)),
            IllegalTransition,
            f"the run is already {run.state}",
        )
    run = drafted()
    run.discard(USER, at(1))
    refused(run, lambda: run.cancel(USER, at(2)), IllegalTransition, "the run is already discarded")


# ------------------------------------------------------------ termination (K2, K3)
def test_k3_failed_terminations_are_counted_until_manual_cleanup() -> None:
    run = running()
    refused(
        run,
        lambda: run.record_termination_failed("500", 3, SYS, at(3)),
        IllegalTransition,
        "no termination in progress (Pod is running)",
    )
    run.cancel(USER, at(3))
    for attempt in (1, 2, 3):
        events = step(run, lambda a=attempt: run.record_termination_failed(f"e{a}", 3, SYS, at(4)))
        assert events == [
            (
                "PodTerminationFailed",
                {
                    "timestamp": at(4),
                    "actor": SYS,
                    "error": f"e{attempt}",
                    "attempt": attempt,
                    "needs_manual": attempt == 3,
                },
            )
        ]
        assert (run.termination_attempts, run.last_error) == (attempt, f"e{attempt}")
        assert run.pod_status == ("needs_manual" if attempt == 3 else "terminating")
    run.record_termination_failed("e4", 3, SYS, at(5))
    assert (run.pod_status, run.termination_attempts) == ("needs_manual", 4)
    assert run.live_pod
    run.record_pod_terminated(SYS, at(6))
    assert (run.state, run.pod_status) == ("cancelled", "terminated")
    assert not run.live_pod


def test_k3_one_allowed_attempt_needs_manual_cleanup_after_the_first_failure() -> None:
    run = releasing()
    run.record_termination_failed("e", 1, SYS, at(5))
    assert run.pod_status == "needs_manual"
    no_change(run, lambda: run.request_release(True, USER, at(6)))


def test_k2_a_termination_is_confirmed_once_and_only_after_a_request() -> None:
    run = running()
    refused(
        run,
        lambda: run.record_pod_terminated(SYS, at(3)),
        IllegalTransition,
        "termination was not requested (Pod is running)",
    )
    run = succeeded()
    assert (run.pod_status, run.ended_at) == ("terminated", at(5))
    no_change(run, lambda: run.record_pod_terminated(SYS, at(6)))
    no_change(run, lambda: run.record_pod_vanished(SYS, at(6)))
    run = running()
    run.record_pod_vanished(SYS, at(3))
    no_change(run, lambda: run.record_pod_terminated(SYS, at(4)))


def test_k2_a_released_pod_with_a_verified_adapter_succeeds() -> None:
    run = releasing()
    assert step(run, lambda: run.record_pod_terminated(SYS, at(5))) == [
        ("PodTerminated", {"timestamp": at(5), "actor": SYS, "pod_id": "pod1"}),
        ("RunSucceeded", {"timestamp": at(5), "actor": SYS}),
    ]
    assert (run.state, run.state_reason, run.ended_at) == ("succeeded", None, at(5))


def test_k2_a_vanished_pod_fails_a_live_run() -> None:
    run = running()
    assert step(run, lambda: run.record_pod_vanished(SYS, at(3))) == [
        ("PodVanished", {"timestamp": at(3), "actor": SYS, "pod_id": "pod1"}),
        (
            "RunFailed",
            {
                "timestamp": at(3),
                "actor": SYS,
                "reason": "pod_vanished",
                "detail": "RunPod no longer lists the Pod",
            },
        ),
    ]
    assert (run.state, run.state_reason, run.pod_status, run.ended_at) == (
        "failed",
        "pod_vanished",
        "gone",
        at(3),
    )
    assert not run.live_pod
    no_change(run, lambda: run.record_pod_vanished(SYS, at(4)))


def test_k2_a_vanished_pod_of_a_finished_run_is_only_recorded() -> None:
    run = cancelled_with_stopped_pod()
    assert step(run, lambda: run.record_pod_vanished(SYS, at(6))) == [
        ("PodVanished", {"timestamp": at(6), "actor": SYS, "pod_id": "pod1"})
    ]
    assert (run.state, run.pod_status, run.ended_at) == ("cancelled", "gone", at(5))
    no_change(drafted(), lambda: None)
    draft = drafted()
    no_change(draft, lambda: draft.record_pod_vanished(SYS, at(1)))


@pytest.mark.parametrize("manual", [False, True])
def test_k2_a_pod_that_vanished_while_terminating_counts_as_terminated(manual: bool) -> None:
    run = releasing()
    if manual:
        run.record_termination_failed("e", 1, SYS, at(5))
    assert step(run, lambda: run.record_pod_vanished(SYS, at(6))) == [
        ("PodTerminated", {"timestamp": at(6), "actor": SYS, "pod_id": "pod1"}),
        ("RunSucceeded", {"timestamp": at(6), "actor": SYS}),
    ]
    assert (run.state, run.pod_status) == ("succeeded", "terminated")
