"""One life cycle: the run aggregate and the run view decide a run's state, reason and Pod status
in one place (`domain.run.advance`).

Random command sequences drive the aggregate; after every event it recorded, the aggregate
(replayed up to that event) and the view's document agree, and both show what the event
promises (`PROMISES`, written here from docs/contract.md, not from the code): a transition
missing from `advance` breaks its event's promise, and a view or aggregate that decided on its
own would disagree with the other."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, cast

from hypothesis import example, given, settings
from hypothesis import strategies as st

import domain.run as r
from domain.base import event_topics
from domain.errors import DomainError
from projections.views.runs import apply_event, new_doc
from tests.builders import small_trial

T0 = datetime(2026, 11, 1, tzinfo=UTC)
CONFIG = small_trial(max_runtime_minutes=30)
P = Decimal("0.60")

Command = Callable[[r.Run, int, datetime], None]

# Every command of the run, by name (`PATHS` below names them).
COMMANDS: dict[str, Command] = {
    "update": lambda run, n, t: run.update_draft(replace(CONFIG, gpu_count=1 + n % 2), "u", t),
    "discard": lambda run, n, t: run.discard("u", t),
    "confirm": lambda run, n, t: run.confirm_launch(P, P, "EU-RO-1", "u", t),
    "reject": lambda run, n, t: run.reject_launch(
        ("price-changed", "low-balance")[n % 2], "", "u", t
    ),
    "pod": lambda run, n, t: run.record_pod_launched(
        f"pod{n % 2}", "name", P, "EU-RO-1", None, 20, 0, "s", t
    ),
    "launch_failed": lambda run, n, t: run.launch_failed("capacity", "", "s", t),
    "train": lambda run, n, t: run.start_training("s", t, {"boot": "b", "seq": n}),
    "export": lambda run, n, t: run.start_export("s", t),
    "exported": lambda run, n, t: run.record_adapter_exported("k", f"{n % 2}" * 64, 10, "s", t),
    "foreign": lambda run, n, t: run.refuse_export_report(
        f"runs/other-{n % 2}/adapter.zip", "c" * 64, r.FOREIGN_ADAPTER_KEY, "s", t
    ),
    "export_failed": lambda run, n, t: run.record_export_failed("export_failed", "", "s", t),
    "limit": lambda run, n, t: run.reach_runtime_limit("s", t),
    "boot_failed": lambda run, n, t: run.fail_boot(
        (r.IMAGE_UNAVAILABLE, r.TRAINER_NEVER_STARTED)[n % 2], "", "s", t
    ),
    "stalled": lambda run, n, t: run.record_stalled(None, "s", t),
    "verified": lambda run, n, t: run.record_adapter_verified("k", "a" * 64, 10, "s", t),
    "refused": lambda run, n, t: run.record_verification_failed(
        ("adapter_not_zip", "")[n % 2], "", "s", t
    ),
    "stopped": lambda run, n, t: run.record_pod_stopped(("export_failed", "")[n % 2], "s", t),
    "resumed": lambda run, n, t: run.record_pod_resumed(P, None, "u", t),
    "recover": lambda run, n, t: run.request_recovery("volume", "k", None, None, "u", t),
    "release": lambda run, n, t: run.request_release(n % 2 == 0, "u", t),
    "cancel": lambda run, n, t: run.cancel("u", t),
    "termination_failed": lambda run, n, t: run.record_termination_failed("boom", 2, "s", t),
    "terminated": lambda run, n, t: run.record_pod_terminated("s", t),
    "vanished": lambda run, n, t: run.record_pod_vanished("s", t),
}
# The commands that end a run early are drawn less often, so that sequences reach deep states.
ENDINGS = ("discard", "cancel", "launch_failed", "vanished")
NAMES = [name for name in COMMANDS for _ in range(1 if name in ENDINGS else 6)]

# Paths through every event of the run (`test_the_paths_meet_every_event`): each one is also
# an example the property always runs.
PATHS = [
    ["update", "reject", "update", "confirm", "pod", "train", "foreign", "export", "foreign",
     "exported", "verified", "terminated"],
    ["confirm", "pod", "export_failed", "stopped", "resumed", "recover", "refused", "recover",
     "verified", "terminated"],
    ["confirm", "pod", "train", "exported", "refused", "stopped", "release", "termination_failed",
     "termination_failed", "terminated"],
    ["confirm", "pod", "limit", "stopped", "cancel", "release", "vanished"],
    ["confirm", "cancel", "pod", "terminated"],
    ["confirm", "launch_failed"],
    ["confirm", "exported", "pod", "verified", "terminated"],
    ["confirm", "pod", "vanished"],
    ["confirm", "pod", "boot_failed", "termination_failed", "boot_failed", "terminated"],
    ["confirm", "pod", "train", "stalled", "stopped", "release", "terminated"],
    ["cancel"],
    ["discard"],
]  # fmt: skip


def life(state: str, reason: str | None, pod: str) -> tuple[str, str | None, str]:
    return (state, reason, pod)


Shown = tuple[str, str | None, str]


def _pod_launched(before: Shown, e: Any) -> Shown:
    state, reason, _ = before
    if state == r.CANCELLING:  # the cancel came first: the Pod's termination is asked already
        return life(state, reason, r.POD_TERMINATING)
    return life(r.RUNNING if state == r.LAUNCHING else state, reason, r.POD_RUNNING)


def _verification_failed(before: Shown, e: Any) -> Shown:
    state, _, pod = before
    reason = e.reason or r.ADAPTER_INVALID
    if state == r.VERIFYING and pod == r.POD_RUNNING:  # stopped first, then needs_recovery
        return life(state, reason, pod)
    return life(r.NEEDS_RECOVERY, reason, pod)


def _stopped(before: Shown, e: Any) -> Shown:
    state, reason, _ = before
    if state in (r.LAUNCHING, r.RUNNING, r.EXPORTING, r.VERIFYING):
        return life(r.NEEDS_RECOVERY, e.reason, r.POD_STOPPED)
    return life(state, reason, r.POD_STOPPED)


def _termination_requested(before: Shown, e: Any) -> Shown:
    state, reason, pod = before
    pod = r.POD_TERMINATING if pod in (r.POD_RUNNING, r.POD_STOPPED) else pod
    if state in r.TERMINAL:
        return life(state, reason, pod)
    if e.intent == "cancel":
        return life(r.CANCELLING, r.USER_CANCELLED, pod)
    return life(r.RELEASING, reason, pod)


# What each event does to (state, reason, Pod status), given them before it (docs/contract.md,
# Runs). An event missing here fails `test_every_event_has_a_promise`.
PROMISES: dict[type[r.Run.Event], Callable[[Shown, Any], Shown]] = {
    r.RunDrafted: lambda b, e: life(r.DRAFT, None, r.POD_NONE),
    r.RunDraftUpdated: lambda b, e: life(r.DRAFT, None, b[2]),
    r.RunDiscarded: lambda b, e: life(r.DISCARDED, None, b[2]),
    r.LaunchConfirmed: lambda b, e: life(r.LAUNCHING, None, b[2]),
    r.LaunchRejected: lambda b, e: life(b[0], e.reason, b[2]),
    r.PodLaunched: _pod_launched,
    r.TrainingStarted: lambda b, e: b,
    r.ExportStarted: lambda b, e: life(r.EXPORTING, None, b[2]),
    r.AdapterExported: lambda b, e: life(r.VERIFYING, None, b[2]),
    r.ExportReportRefused: lambda b, e: b,  # recorded; the run goes on as it was (N2)
    r.ExportFailed: lambda b, e: life(b[0], r.EXPORT_FAILED, b[2]),
    r.RuntimeLimitReached: lambda b, e: life(b[0], r.RUNTIME_LIMIT, b[2]),
    r.TrainerStalled: lambda b, e: life(b[0], r.TRAINER_STALLED, b[2]),
    r.BootFailed: lambda b, e: life(b[0], e.reason, b[2]),
    r.AdapterVerified: lambda b, e: life(r.RELEASING, None, b[2]),
    r.AdapterVerificationFailed: _verification_failed,
    r.PodStopped: _stopped,
    r.PodResumed: lambda b, e: life(b[0], b[1], r.POD_RUNNING),
    r.RecoveryRequested: lambda b, e: life(r.RECOVERING, b[1], b[2]),
    r.PodTerminationRequested: _termination_requested,
    r.PodTerminationFailed: lambda b, e: (
        life(b[0], b[1], r.POD_NEEDS_MANUAL) if e.needs_manual else b
    ),
    r.PodTerminated: lambda b, e: life(b[0], b[1], r.POD_TERMINATED),
    r.PodVanished: lambda b, e: life(b[0], b[1], r.POD_GONE),
    r.RunSucceeded: lambda b, e: life(r.SUCCEEDED, None, b[2]),
    r.RunFailed: lambda b, e: life(r.FAILED, e.reason, b[2]),
    r.RunCancelled: lambda b, e: life(r.CANCELLED, e.reason, b[2]),
}


@dataclass
class Followed:
    """The events a command sequence recorded, each checked as it is replayed."""

    events: list[r.Run.Event]
    kinds: set[type[r.Run.Event]]


def record(steps: list[tuple[str, int]]) -> list[r.Run.Event]:
    """Drive a new run through `steps` (refused commands record nothing); its events."""
    run = r.Run.draft("org", CONFIG, "u", T0)
    t = T0
    for name, n in steps:
        t += timedelta(minutes=1)
        with contextlib.suppress(DomainError):
            COMMANDS[name](run, n, t)
    return [cast(r.Run.Event, e) for e in run.pending_events]


def follow(events: list[r.Run.Event]) -> Followed:
    """Replay the events one by one into an aggregate and into the view's document; after
    each, both show what the event promises, and the same."""
    aggregate: Any = None
    doc: dict[str, Any] | None = None
    shown: Shown | None = None
    for event in events:
        aggregate = event.mutate(aggregate)
        expected = PROMISES[type(event)](shown or life(r.DRAFT, None, r.POD_NONE), event)
        got = (aggregate.state, aggregate.state_reason, aggregate.pod_status)
        assert got == expected, f"the aggregate after {type(event).__name__}"
        if isinstance(event, r.RunDrafted):
            doc = new_doc("run", event)
        elif not isinstance(event, r.RunDiscarded):  # the view deletes a discarded draft
            assert doc is not None
            apply_event(doc, event)
            viewed = (doc["state"], doc["state_reason"], doc["cleanup"]["pod_status"])
            assert viewed == got, f"the view and the aggregate after {type(event).__name__}"
        shown = got
    return Followed(events, {type(e) for e in events})


steps = st.lists(st.tuples(st.sampled_from(NAMES), st.integers(0, 9)), min_size=30, max_size=80)


@settings(max_examples=200, deadline=None)
@given(steps=steps)
@example(steps=[(name, 0) for name in PATHS[0]])
@example(steps=[(name, 1) for name in PATHS[1]])
@example(steps=[(name, 0) for name in PATHS[2]])
def test_the_aggregate_and_the_view_agree_after_every_event(steps: list[tuple[str, int]]) -> None:
    follow(record(steps))


def test_the_paths_meet_every_event_and_keep_every_promise() -> None:
    met: set[type[r.Run.Event]] = set()
    for path in PATHS:
        for n in (0, 1):
            met |= follow(record([(name, n) for name in path])).kinds
    assert {e.__name__ for e in PROMISES} - {e.__name__ for e in met} == set()


def test_every_event_has_a_promise() -> None:
    topics = {cls.TOPIC for cls in PROMISES}
    assert set(event_topics(r.Run.Event)) - {"tensorant.Run.Event"} <= topics


def test_the_allowed_actions_are_what_the_commands_accept() -> None:
    """Each flag of `allowed_actions` matches its command: offered exactly when the command
    would record something, in every state a path reaches."""
    probes: dict[str, Command] = {
        "edit": COMMANDS["update"],
        "delete": COMMANDS["discard"],
        "launch": COMMANDS["confirm"],
        "cancel": COMMANDS["cancel"],
        "resume": COMMANDS["resumed"],
        "release": lambda run, n, t: run.request_release(True, "u", t),
        "recover_verify": COMMANDS["recover"],
        "recover_upload": lambda run, n, t: run.request_recovery("upload", "k", "a", 1, "u", t),
    }
    assert set(probes) == set(r.ACTIONS)
    seen: set[tuple[str, str]] = set()
    for path in PATHS:
        for cut in range(len(path) + 1):
            events = record([(name, 0) for name in path[:cut]])
            run: Any = None
            for event in events:
                run = event.mutate(run)
            if (run.state, run.pod_status) in seen:
                continue
            seen.add((run.state, run.pod_status))
            for action, command in probes.items():
                probe: Any = None
                for event in events:
                    probe = event.mutate(probe)
                before = len(probe.pending_events)
                with contextlib.suppress(DomainError):
                    command(probe, 0, T0 + timedelta(days=1))
                recorded = len(probe.pending_events) > before
                offered = action in r.allowed_actions(run.state, run.pod_status)
                assert offered == recorded, f"{action} in {run.state} (Pod {run.pod_status})"
    assert len(seen) >= 12
