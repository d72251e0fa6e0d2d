"""No Pod bills unseen (R5, R8) in the domain: why a Pod never ran the trainer, read from its
log; when its boot is overdue or its trainer silent; and what each decision records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from domain.boot import boot_failure
from domain.errors import IllegalTransition
from domain.run import Run
from tests.builders import small_trial

T0 = datetime(2026, 11, 1, tzinfo=UTC)
DEADLINE, QUIET = timedelta(minutes=25), timedelta(minutes=10)


def running(**config: object) -> Run:
    run = Run.draft("org", small_trial(**config), "u", T0)
    run.confirm_launch(Decimal("0.6"), Decimal("0.6"), "EU-RO-1", "u", T0)
    run.record_pod_launched("pod1", "n", Decimal("0.6"), "EU-RO-1", None, 20, 0, "s", T0)
    return run


@pytest.mark.parametrize(
    ("lines", "reason"),
    [
        (["error pulling image: pull access denied for x/y"], "image_unavailable"),
        (["Error response: manifest for runpod/pytorch:9 not found"], "image_unavailable"),
        (["Back-off pulling image: ImagePullBackOff"], "image_unavailable"),
        (
            ["nvidia-container-cli: requirement error: unsatisfied condition: cuda>=13.0"],
            "cuda_unavailable",
        ),
        (["RuntimeError: CUDA driver version is insufficient for CUDA runtime version"],
         "cuda_unavailable"),
        (["starting container", "Traceback (most recent call last):"], "trainer_never_started"),
        ([], "trainer_never_started"),
    ],
)  # fmt: skip
def test_r5_the_pods_log_names_why_it_never_ran_the_trainer(lines: list[str], reason: str) -> None:
    got, detail = boot_failure(lines)
    assert got == reason
    assert detail == (lines[-1] if reason != "trainer_never_started" else "")


def test_r5_the_cuda_gate_wins_over_the_pull_loop_and_the_latest_line_is_the_detail() -> None:
    lines = ["error pulling image: x", "unsatisfied condition: cuda>=13.0 (1)", "unsatisfied "
             "condition: cuda>=13.0 (2)", "error pulling image: y " + "z" * 400]  # fmt: skip
    reason, detail = boot_failure(lines)
    assert (reason, detail) == ("cuda_unavailable", "unsatisfied condition: cuda>=13.0 (2)")
    assert boot_failure(lines[:1] + lines[3:])[1] == lines[3][:300]


def test_r5_the_boot_is_overdue_only_without_a_report_and_only_before_training() -> None:
    run = running()
    assert not run.boot_overdue(T0 + DEADLINE - timedelta(seconds=1), DEADLINE, None, QUIET)
    assert run.boot_overdue(T0 + DEADLINE, DEADLINE, None, QUIET)
    recent = T0 + DEADLINE - timedelta(minutes=1)
    assert not run.boot_overdue(T0 + DEADLINE, DEADLINE, recent, QUIET)
    assert run.boot_overdue(recent + QUIET, DEADLINE, recent, QUIET)
    run.start_training("trainer", T0 + timedelta(minutes=1))
    assert not run.boot_overdue(T0 + DEADLINE, DEADLINE, None, QUIET)


def test_r5_a_failed_boot_terminates_the_pod_and_ends_failed_with_its_reason() -> None:
    run = running()
    run.fail_boot("image_unavailable", "pull access denied", "system", T0 + DEADLINE)
    run.fail_boot("cuda_unavailable", "later", "system", T0 + DEADLINE)  # decided already
    assert (run.state, run.state_reason, run.pod_status, run.termination_intent) == (
        "releasing",
        "image_unavailable",
        "terminating",
        "fail",
    )
    with pytest.raises(IllegalTransition):
        run.cancel("u", T0 + DEADLINE)  # the Pod is already being released
    run.record_pod_terminated("system", T0 + DEADLINE)
    assert (run.state, run.state_reason, run.ended_at) == (
        "failed",
        "image_unavailable",
        T0 + DEADLINE,
    )
    names = [type(e).__name__ for e in run.pending_events][-4:]
    assert names == ["BootFailed", "PodTerminationRequested", "PodTerminated", "RunFailed"]


def test_r5_only_a_booting_run_can_fail_its_boot() -> None:
    run = running()
    run.start_training("trainer", T0)
    with pytest.raises(IllegalTransition, match="cannot fail the boot of a run that is running"):
        run.fail_boot("trainer_never_started", "", "system", T0)
    draft = Run.draft("org", small_trial(), "u", T0)
    with pytest.raises(IllegalTransition):
        draft.fail_boot("trainer_never_started", "", "system", T0)


def test_r8_a_silent_trainer_is_stopped_and_retained_with_trainer_stalled() -> None:
    run = running()
    assert not run.stalled(T0 + QUIET, None, QUIET)  # it never trained: a boot matter
    run.start_training("trainer", T0 + timedelta(minutes=2))
    last = T0 + timedelta(minutes=5)
    assert not run.stalled(last + QUIET - timedelta(seconds=1), last, QUIET)
    assert run.stalled(last + QUIET, last, QUIET)
    run.record_stalled(last, "system", last + QUIET)
    run.record_stalled(last, "system", last + QUIET)  # a stop is decided already
    assert (run.state_reason, run.stop_reason, run.stop_pending) == (
        "trainer_stalled",
        "trainer_stalled",
        True,
    )
    assert not run.stalled(last + 2 * QUIET, last, QUIET)
    run.record_pod_stopped(run.stop_reason or "", "system", last + QUIET)
    assert (run.state, run.state_reason, run.pod_status) == (
        "needs_recovery",
        "trainer_stalled",
        "stopped",
    )
