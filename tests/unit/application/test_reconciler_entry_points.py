"""The reconciler's entry points (K1–K3, C1) on stubs: who is compared, how often after
errors, what is swallowed and logged, and the structured decision line operators read.
Written against the mutation run of application/reconciler.py (docs/mutation.md)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from types import SimpleNamespace
from typing import Any, cast
from uuid import uuid4

import pytest
from eventsourcing.persistence import IntegrityError

from application import errors, reconciler
from application.ports import PodInfo
from application.reconciler import Reconciler, decision
from application.run_settings import RunSettings
from domain.run import Run
from tests.builders import small_trial
from tests.fakes import FixedClock

LOGGER = "tensorant.reconcile"


@dataclass
class Stubs:
    calls: list[Any] = field(default_factory=list)
    live: list[tuple[str, str]] = field(default_factory=list)
    key_error: Exception | None = None
    list_error: Exception | None = None
    pods: list[PodInfo] = field(default_factory=list)
    failing_mailboxes: set[str] = field(default_factory=set)
    refresh_error: Exception | None = None

    # RunIndex
    def live_runs(self) -> list[tuple[str, str]]:
        return self.live

    # ConnectionService
    def runpod_key(self, org_id: str) -> str:
        self.calls.append(("key", org_id))
        if self.key_error:
            raise self.key_error
        return f"key-of-{org_id}"

    def refresh_account(self, org_id: str) -> None:
        self.calls.append(("refresh", org_id))
        if self.refresh_error:
            raise self.refresh_error

    # ComputeProvider
    def list_pods(self, key: str) -> list[PodInfo]:
        self.calls.append(("list", key))
        if self.list_error:
            raise self.list_error
        return self.pods

    # RunLocks
    @contextmanager
    def hold(self, name: str) -> Iterator[None]:
        self.calls.append(("lock", name))
        yield
        self.calls.append(("unlock", name))

    # ComputeProvider: a direct read
    def get_pod(self, key: str, pod_id: str) -> PodInfo | None:
        self.calls.append(("get_pod", key, pod_id))
        return next((p for p in self.pods if p.id == pod_id), None)

    # MailboxReader
    def read(self, run_id: str) -> None:
        self.calls.append(("mailbox", run_id))
        if run_id in self.failing_mailboxes:
            raise OSError(f"no bucket for {run_id}")


@dataclass(frozen=True)
class Probe(Reconciler):
    """The reconciler with its per-run and orphan steps recorded (or failing) instead of run."""

    failures: dict[str, Exception] = field(default_factory=dict)

    def _compare_run(self, run_id: str, listed: dict[str, PodInfo], key: str) -> None:
        self.compute.calls.append(("compare", run_id, sorted(listed), key))  # type: ignore[attr-defined]
        if run_id in self.failures:
            raise self.failures[run_id]

    def _reconcile_orphans(self, org_id: str, listed: dict[str, PodInfo], key: str) -> None:
        self.compute.calls.append(("orphans", org_id, sorted(listed), key))  # type: ignore[attr-defined]
        if "orphans" in self.failures:
            raise self.failures["orphans"]


@dataclass(frozen=True)
class CountingCompares(Reconciler):
    error: Exception | None = None

    def compare_with_runpod(self, org_id: str, run_ids: list[str] | None = None) -> bool:
        self.compute.calls.append(("compare_with_runpod", org_id, run_ids))  # type: ignore[attr-defined]
        if self.error:
            raise self.error
        return True


def build(
    kind: type[Reconciler], stubs: Stubs, mailbox: bool = True, log: Any = None, **kw: Any
) -> Any:
    return kind(
        log=cast(Any, log),  # None where the steps that read the log are stubbed
        compute=cast(Any, stubs),
        clock=FixedClock(),
        settings=RunSettings(trainer_secret=b"k" * 32, account_refresh_interval_s=60.0),
        locks=cast(Any, stubs),
        runs=cast(Any, stubs),
        connections=cast(Any, stubs),
        mailbox=cast(Any, stubs) if mailbox else None,
        **kw,
    )


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The monotonic clock the reconciler reads, set by the test (now[0])."""
    now = [0.0]
    monkeypatch.setattr(reconciler, "time", SimpleNamespace(monotonic=lambda: now[0]))
    return now


def pod(pod_id: str) -> PodInfo:
    return PodInfo(pod_id, f"tensorant-run-{pod_id}", "running", Decimal("0.44"))


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


# ------------------------------------------------------------ decision lines
def test_k2_each_decision_is_one_structured_line_with_its_ids(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        decision("pod_vanished", "org-1", "run-1", "pod-1", was="running", attempt=2)
    [record] = caplog.records
    assert record.name == LOGGER and record.levelno == logging.INFO
    assert record.getMessage() == (
        "reconcile pod_vanished org=org-1 run=run-1 pod=pod-1 was=running attempt=2"
    )
    fields = {k: getattr(record, k) for k in ("decision", "org_id", "run_id", "pod_id")}
    assert fields == {
        "decision": "pod_vanished",
        "org_id": "org-1",
        "run_id": "run-1",
        "pod_id": "pod-1",
    }
    assert (getattr(record, "was"), getattr(record, "attempt")) == ("running", 2)  # noqa: B009


# ------------------------------------------------------------ mailboxes
def test_every_mailbox_is_read_even_after_one_fails(caplog: pytest.LogCaptureFixture) -> None:
    stubs = Stubs(failing_mailboxes={"r1"})
    with caplog.at_level(logging.INFO, logger=LOGGER):
        build(Reconciler, stubs).read_mailboxes(["r1", "r2"])
    assert stubs.calls == [("mailbox", "r1"), ("mailbox", "r2")]
    assert warnings_of(caplog) == ["reading the mailbox of run r1 failed: no bucket for r1"]


def test_without_a_mailbox_reader_nothing_is_read_or_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stubs = Stubs()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        build(Reconciler, stubs, mailbox=False).read_mailboxes(["r1"])
    assert (stubs.calls, caplog.records) == ([], [])


# ------------------------------------------------------------ after an error (K2)
def test_k2_after_errors_an_organization_is_compared_at_most_every_two_seconds(
    clock: list[float],
) -> None:
    stubs = Stubs()
    r = build(CountingCompares, stubs)
    org, other = str(uuid4()), str(uuid4())
    for now in (0.0, 1.9, 2.0, 3.99, 4.0):
        clock[0] = now
        r.after_error(org)
    clock[0] = 4.5
    r.after_error(other)
    assert stubs.calls == [
        ("compare_with_runpod", org, None),
        ("compare_with_runpod", org, None),
        ("compare_with_runpod", org, None),
        ("compare_with_runpod", other, None),
    ]


def test_k2_a_failed_comparison_after_an_error_is_logged_not_raised(
    clock: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    org = str(uuid4())
    r = build(CountingCompares, Stubs(), error=RuntimeError("boom"))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        r.after_error(org)
    assert warnings_of(caplog) == [f"reconcile after an error for organization {org} failed: boom"]


# ------------------------------------------------------------ account refresh (C1, K1)
def test_c1_the_account_is_refreshed_at_most_once_per_interval_even_when_it_fails(
    clock: list[float], caplog: pytest.LogCaptureFixture
) -> None:
    stubs = Stubs(refresh_error=errors.ProviderError("RunPod is down"))
    r = build(Reconciler, stubs)
    org = str(uuid4())
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for now in (0.0, 59.9, 60.0, 119.9, 120.0):
            clock[0] = now
            r.refresh_account_when_due(org)
    assert stubs.calls == [("refresh", org)] * 3
    assert (
        warnings_of(caplog)
        == [f"refreshing the account of organization {org} failed: RunPod is down"] * 3
    )


# ------------------------------------------------------------ compare_with_runpod (K2)
def test_k2_the_organizations_live_runs_are_compared_then_its_orphans() -> None:
    org = str(uuid4())
    stubs = Stubs(live=[(org, "r1"), ("other-org", "r2"), (org, "r3")], pods=[pod("p1")])
    assert build(Probe, stubs).compare_with_runpod(org) is True
    key = f"key-of-{org}"
    assert stubs.calls == [
        ("key", org),
        ("list", key),
        ("compare", "r1", ["p1"], key),
        ("compare", "r3", ["p1"], key),
        ("lock", f"orphans:{org}"),
        ("orphans", org, ["p1"], key),
        ("unlock", f"orphans:{org}"),
    ]


def test_k2_given_run_ids_are_compared_instead_of_the_live_ones() -> None:
    stubs = Stubs(live=[("o", "r1")])
    build(Probe, stubs).compare_with_runpod("o", ["r9"])
    assert [c[1] for c in stubs.calls if c[0] == "compare"] == ["r9"]


def test_k2_an_organization_without_a_key_has_nothing_at_runpod() -> None:
    stubs = Stubs(live=[("o", "r1")], key_error=errors.SecretUnavailable("no key"))
    assert build(Probe, stubs).compare_with_runpod("o") is True
    assert stubs.calls == [("key", "o")]


def test_k2_a_listing_that_fails_compares_nothing_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stubs = Stubs(live=[("o", "r1")], list_error=errors.ProviderUnavailable("x" * 300))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert build(Probe, stubs).compare_with_runpod("o") is False
    assert stubs.calls == [("key", "o"), ("list", "key-of-o")]
    [record] = caplog.records
    assert record.getMessage() == f"reconcile list_failed org=o run=None pod=None error={'x' * 200}"
    assert getattr(record, "error") == "x" * 200  # noqa: B009


def test_k2_a_run_that_fails_to_compare_does_not_stop_the_others(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stubs = Stubs(live=[("o", "r1"), ("o", "r2"), ("o", "r3")])
    failures: dict[str, Exception] = {
        "r1": IntegrityError("version taken"),
        "r2": RuntimeError("boom"),
        "orphans": IntegrityError("version taken"),
    }
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert build(Probe, stubs, failures=failures).compare_with_runpod("o") is True
    assert [c[1] for c in stubs.calls if c[0] in ("compare", "orphans")] == ["r1", "r2", "r3", "o"]
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "run r1 changed while reconciling it; next tick looks again"),
        (logging.WARNING, "reconcile of run r2 failed: boom"),
        (logging.INFO, "orphans of o changed while reconciling; next tick looks again"),
    ]


# ------------------------------------------------------------ one run, under its lock (K2)
@dataclass
class RunLog:
    """The log with one run in it; what is saved is kept as events."""

    run: Run
    saved: list[Any] = field(default_factory=list)
    calls: list[Any] = field(default_factory=list)

    def load(self, cls: type[Run], run_id: str) -> Run:
        self.calls.append(("load", run_id))
        return self.run

    def save_all(self, *aggregates: Run) -> int:
        for a in aggregates:
            self.saved.extend(a.collect_events())
        return 1


def running_run() -> Run:
    t0 = FixedClock().now() - timedelta(hours=1)
    run = Run.draft("o", small_trial(), "alice", t0)
    run.confirm_launch(Decimal("0.5"), Decimal("0.5"), "EU-RO-1", "alice", t0)
    run.record_pod_launched("pod1", "n", Decimal("0.5"), None, None, 20, 0, "system", t0)
    run.collect_events()
    return run


@pytest.mark.parametrize(
    ("listed", "events"),
    [
        ([], ["PodVanished", "RunFailed"]),
        # an hour into a 30-minute run: stopped at its runtime limit (RunPod's stopAfter)
        ([PodInfo("pod1", "n", "stopped", Decimal("0.5"))], ["RuntimeLimitReached", "PodStopped"]),
    ],
)
def test_k2_a_run_is_compared_under_its_lock_and_recorded_by_the_system_now(
    listed: list[PodInfo], events: list[str]
) -> None:
    stubs = Stubs(pods=listed)
    log = RunLog(running_run())
    r = build(Reconciler, stubs, log=log)
    r._compare_run("run-1", {p.id: p for p in listed}, "k")
    assert stubs.calls[0] == ("lock", "run-1") and stubs.calls[-1] == ("unlock", "run-1")
    assert log.calls == [("load", "run-1")]
    assert [type(e).__name__ for e in log.saved] == events
    assert {(getattr(e, "actor"), e.timestamp) for e in log.saved} == {  # noqa: B009
        ("system", FixedClock().now())
    }
