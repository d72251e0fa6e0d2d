"""The Pod-log follower. It resumes after a dropped stream with the last event id (no
line lost or doubled), backs off on errors and 429 (at least the answer's Retry-After), holds
the run's lease so no second follower starts, and ends when the run leaves the training states."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from application.errors import ProviderUnavailable
from application.memory import LocalLeases, MemoryReportStore
from application.pod_logs import POD_LOGS, PodLogFollowers
from application.ports import PodLogLine
from application.services import Services
from trainer.protocol import Log, Progress, format_report_line

BOOT = "f0110we5b00t0000"
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)


class ScriptedLogs:
    """A Pod's log as RunPod's SSE serves it: each call resumes after `last_event_id`, and the
    scripted faults end a stream early or refuse it."""

    def __init__(self, lines: list[str], faults: list[Any]) -> None:
        self.events = [
            PodLogLine(id=f"2026-12-01T10:00:00Z/{i:012d}", time=T0, source="container", line=x)
            for i, x in enumerate(lines, start=1)
        ]
        # per call: None, ("cut", n) (broken after n events), ("end", n) (ended cleanly after n
        # events) or an exception
        self.faults = list(faults)
        self.calls: list[str | None] = []

    def pod_logs(
        self, api_key: str, pod_id: str, last_event_id: str | None = None, tail: int = 5000
    ) -> Iterator[PodLogLine]:
        self.calls.append(last_event_id)
        fault = self.faults.pop(0) if self.faults else None
        if isinstance(fault, Exception):
            raise fault
        start = 0
        if last_event_id:
            start = next(i for i, e in enumerate(self.events) if e.id == last_event_id) + 1
        todo = self.events[start:]
        if fault is not None:
            todo = todo[: fault[1]]
        yield from todo
        if fault is not None and fault[0] == "cut":
            raise ProviderUnavailable("RunPod's log stream broke: RemoteProtocolError")


def _stdout() -> tuple[list[str], list[str]]:
    """The Pod's stdout and what the run's log must show (report lines become their text)."""
    out = ["pulling image tensorant/trainer:1.0", "tensorant trainer starting"]
    want = list(out)
    for seq in range(1, 9):
        at = f"2026-12-01T10:00:{seq:02d}.000Z"
        if seq % 3 == 0:
            p = Progress(boot=BOOT, seq=seq, time=at, phase="training", step=seq, total_steps=8)
            out.append(format_report_line(p))
        else:
            out.append(format_report_line(Log(boot=BOOT, seq=seq, time=at, text=f"line {seq}")))
            want.append(f"line {seq}")
        out.append(f"plain {seq}")
        want.append(f"plain {seq}")
    return out, want


def _followers(
    app: Services, source: Any, slept: list[float], drain_s: float = 0.0
) -> PodLogFollowers:
    """Followers whose sleeps are recorded, not slept; time moves only by those sleeps."""
    return PodLogFollowers(
        app.log,
        source,
        app.connections,
        app.trainer,
        app.reactor.runs,
        LocalLeases(),
        sleep=slept.append,
        drain_s=drain_s,
        monotonic=lambda: sum(slept),
    )


def _lines(app: Services, run_id: str) -> list[str]:
    store = app.trainer.reports
    assert isinstance(store, MemoryReportStore)
    return [t for _, t in store.lines.get(run_id, [])]


def test_three_cuts_and_a_429_lose_and_double_nothing(world: Any) -> None:
    app, _compute, _objects, org, run_id = world
    app.runs.launch(org, run_id, "owner", True, "1.64")
    app.reactor.drive_run(run_id)
    out, want = _stdout()
    too_many = ProviderUnavailable("RunPod's log stream answered HTTP 429", retry_after_s=7)
    source = ScriptedLogs(out, [("cut", 3), too_many, ("cut", 5), ("cut", 4), None])
    slept: list[float] = []
    followers = _followers(app, source, slept)
    done = threading.Event()

    def until_drained(seconds: float) -> None:
        slept.append(seconds)
        if len(source.calls) >= 5:
            app.runs.cancel(org, run_id, "owner")  # the run leaves the training states
            done.set()

    followers.sleep = until_drained
    followers.follow(run_id)
    assert done.is_set()
    assert _lines(app, run_id) == want
    assert source.calls[0] is None  # the first stream starts from the Pod's backlog
    ids = [e.id for e in source.events]
    assert source.calls[1:] == [ids[2], ids[2], ids[7], ids[11]]
    assert 7 in slept  # the 429's Retry-After was waited out
    cursor = app.trainer.reports.get_state(run_id, POD_LOGS)
    assert cursor == {"last_event_id": source.events[-1].id}
    progress = app.report_reads.shown_progress(run_id)
    assert progress is not None and progress["via"] == "pod_logs"


def test_what_the_pod_printed_before_the_run_moved_on_is_still_read(world: Any) -> None:
    """The run leaves the training states (its final report came by callback) while the Pod-log
    stream is cut: the follower reads on for `drain_s`, so the Pod's last plain lines, which
    only this channel brings, are stored; then it ends."""
    app, _compute, _objects, org, run_id = world
    app.runs.launch(org, run_id, "owner", True, "1.64")
    app.reactor.drive_run(run_id)
    out, want = _stdout()
    source = ScriptedLogs(out, [("cut", 3)])
    slept: list[float] = []
    followers = _followers(app, source, slept, drain_s=5.0)

    def run_moves_on(seconds: float) -> None:
        if not slept:
            app.runs.cancel(org, run_id, "owner")  # while the stream is cut
        slept.append(seconds)

    followers.sleep = run_moves_on
    followers.follow(run_id)
    assert _lines(app, run_id) == want  # every line, the last plain ones included
    assert 5.0 <= sum(slept) <= 8.0, slept  # it read on for drain_s, then ended


def test_one_follower_per_run_and_none_for_a_run_not_training(world: Any) -> None:
    app, _compute, _objects, org, run_id = world

    class Live:
        def live_runs(self) -> list[tuple[str, str]]:
            return [(org, run_id)]

    block = threading.Event()

    class Blocking:
        def pod_logs(self, *_a: Any, **_k: Any) -> Iterator[PodLogLine]:
            block.wait(5)
            return iter(())

    leases = LocalLeases()
    slept: list[float] = []
    first = _followers(app, Blocking(), slept)
    second = _followers(app, Blocking(), slept)
    first.runs = second.runs = Live()  # type: ignore[assignment]
    first.leases = second.leases = leases
    assert first.scan() == []  # a draft has no Pod to follow
    app.runs.launch(org, run_id, "owner", True, "1.64")
    app.reactor.drive_run(run_id)
    assert first.scan() == [run_id]
    assert first.scan() == []  # already following it
    assert second.scan() == []  # another worker holds the lease
    app.runs.cancel(org, run_id, "owner")
    block.set()
    first.stop()
    for t in list(first._threads.values()):
        t.join(5)
    assert leases.try_take(f"pod-logs:{run_id}") is not None  # released when it ended


def test_a_lease_that_cannot_be_taken_skips_the_scan_instead_of_breaking_it(world: Any) -> None:
    """PostgreSQL out of connections for another lease: the scan logs, starts nothing more, and
    a later scan (connections freed) follows the run."""
    app, _compute, _objects, org, run_id = world
    app.runs.launch(org, run_id, "owner", True, "1.64")
    app.reactor.drive_run(run_id)

    class Exhausted(LocalLeases):
        full = True

        def try_take(self, name: str) -> Any:
            if self.full:
                raise RuntimeError("FATAL: sorry, too many clients already")
            return super().try_take(name)

    class Idle:
        def pod_logs(self, *_a: Any, **_k: Any) -> Iterator[PodLogLine]:
            return iter(())

    class Live:
        def live_runs(self) -> list[tuple[str, str]]:
            return [(org, run_id)]

    leases = Exhausted()
    followers = _followers(app, Idle(), [])
    followers.leases = leases
    followers.runs = Live()  # type: ignore[assignment]
    assert followers.scan() == []
    leases.full = False
    assert followers.scan() == [run_id]
    app.runs.cancel(org, run_id, "owner")
    followers.stop()


def test_a_run_that_left_training_before_any_follower_is_read_out_once(world: Any) -> None:
    """A trainer that dies at once: the reconciler stops its Pod before any worker's scan came
    round. A scan still reads what the Pod printed (for drain_s), then never again."""
    app, _compute, _objects, org, run_id = world
    app.runs.launch(org, run_id, "owner", True, "1.64")
    app.reactor.drive_run(run_id)
    app.runs.cancel(org, run_id, "owner")  # out of the training states, its Pod still known
    out = ["Traceback (most recent call last):", "RuntimeError: CUDA error: illegal address"]
    source = ScriptedLogs(out, [])

    class Live:
        def live_runs(self) -> list[tuple[str, str]]:
            return [(org, run_id)]

    slept: list[float] = []
    followers = _followers(app, source, slept, drain_s=2.0)
    followers.runs = Live()  # type: ignore[assignment]
    assert followers.scan() == [run_id]
    for t in list(followers._threads.values()):
        t.join(10)
    assert _lines(app, run_id) == out
    assert followers.scan() == []  # read out: not followed again


def test_a_stream_that_ends_after_bringing_lines_is_reopened_at_once(world: Any) -> None:
    """A clean end mid-run (a proxy closing it): the Pod may be released within the second, so
    the follower reconnects without waiting; a stream that brought nothing waits a second."""
    app, _compute, _objects, org, run_id = world
    app.runs.launch(org, run_id, "owner", True, "1.64")
    app.reactor.drive_run(run_id)
    out, want = _stdout()
    source = ScriptedLogs(out, [("end", 4), ("end", 5), None, None])
    slept: list[float] = []
    followers = _followers(app, source, slept)

    def then_cancel(seconds: float) -> None:
        slept.append(seconds)
        if len(source.calls) >= 4:
            app.runs.cancel(org, run_id, "owner")

    followers.sleep = then_cancel
    followers.follow(run_id)
    assert _lines(app, run_id) == want
    assert slept[:2] == [0.0, 0.0]  # reopened at once after each clean end with lines
    assert slept[3] == 1.0  # the empty fourth stream: a second before looking again


def test_lines_of_many_runs_are_written_together_and_a_failed_write_keeps_them(
    world: Any,
) -> None:
    """R6 at scale: read lines wait for the batch (`flush_s`); one write holds every run's
    lines and cursor; a batch that fails to write is written, in order, by the next flush."""
    app, _compute, _objects, _org, _run_id = world
    followers = _followers(app, ScriptedLogs([], []), [])
    followers.flush_s = 60.0
    store = app.trainer.reports
    assert isinstance(store, MemoryReportStore)
    writes: list[list[str]] = []
    failing = [True]
    original = store.append_many

    def recorded(batches: Any, *rest: Any) -> dict[str, int]:
        if failing.pop() if failing else False:
            raise RuntimeError("the database is away")
        writes.append(sorted(batches))
        return original(batches, *rest)

    store.append_many = recorded  # type: ignore[method-assign, assignment]

    def line(run: str, i: int) -> PodLogLine:
        report = format_report_line(Log(boot=BOOT, seq=i, time="2026-12-01T10:00:00Z", text=f"{i}"))
        return PodLogLine(id=f"{run}/{i}", time=T0, source="container", line=report)

    for i in (1, 2):
        followers._add("run-a", line("run-a", i))
        followers._add("run-b", line("run-b", i))
    assert writes == [] and _lines(app, "run-a") == []  # waiting for the batch
    with pytest.raises(RuntimeError):
        followers.flush()
    followers._add("run-a", line("run-a", 3))
    followers.flush()
    assert writes == [["run-a", "run-b"]]  # one write for both runs
    assert _lines(app, "run-a") == ["1", "2", "3"]
    assert _lines(app, "run-b") == ["1", "2"]
    assert store.get_state("run-a", POD_LOGS) == {"last_event_id": "run-a/3"}
    assert store.get_state("run-b", POD_LOGS) == {"last_event_id": "run-b/2"}


def test_a_scan_loads_no_run_another_worker_follows(world: Any) -> None:
    """K2 at scale: most live runs are other workers'; the lease is tried first (one lock
    attempt), and only a run this worker may follow is loaded to see whether it trains."""
    app, _compute, _objects, org, run_id = world
    app.runs.launch(org, run_id, "owner", True, "1.64")
    app.reactor.drive_run(run_id)

    class Live:
        def live_runs(self) -> list[tuple[str, str]]:
            return [(org, run_id)]

    leases = LocalLeases()
    held = leases.try_take(f"pod-logs:{run_id}")  # another worker's
    assert held is not None
    followers = _followers(app, ScriptedLogs([], []), [])
    followers.runs = Live()  # type: ignore[assignment]
    followers.leases = leases
    loaded: list[str] = []

    class CountingLog:
        def load(self, kind: Any, aggregate_id: Any, *a: Any, **k: Any) -> Any:
            loaded.append(str(aggregate_id))
            return app.log.load(kind, aggregate_id, *a, **k)

        def __getattr__(self, name: str) -> Any:
            return getattr(app.log, name)

    followers.log = CountingLog()  # type: ignore[assignment]
    assert followers.scan() == []
    assert loaded == []
    held.release()  # that worker is gone: this one loads the run and follows it
    assert followers.scan() == [run_id]
    assert loaded[0] == run_id
    app.runs.cancel(org, run_id, "owner")
    followers.stop()
