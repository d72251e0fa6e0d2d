"""Heavy adapter checks run aside in a few child processes, at most one per
organization, organizations taking turns; a small adapter is still checked at once, in line."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from application.adapter_check import AdapterVerdict
from application.heavy_checks import HeavyChecks, HeavyJob
from application.ports import S3Credentials, StorageLocation
from domain.lora import CATALOGUE_ARCHITECTURES
from tests.fakes import S3_ACCESS, S3_SECRET, FakeObjectStore
from tests.lora_builders import largest_zeros_adapter, lora_zip

SMALL_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
LOCATION = StorageLocation(
    "runpod_volume", "https://s3api-eu-ro-1.runpod.io", "vol1euro", "EU-RO-1"
)
CREDS = S3Credentials(S3_ACCESS, S3_SECRET)


class GatedExecutor(Executor):
    """Runs nothing: each check waits until the test lets its run's check end, and says which
    file it had."""

    def __init__(self, dies: frozenset[str] = frozenset()) -> None:
        self.started: list[str] = []
        self.dies = dies  # runs whose child is killed mid-check
        self._gates: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def _gate(self, run: str) -> threading.Event:
        with self._lock:
            return self._gates.setdefault(run, threading.Event())

    def end(self, run: str) -> None:
        self._gate(run).set()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        path = str(args[0])
        run = os.path.basename(path).split("-")[0]
        self.started.append(run)
        assert self._gate(run).wait(10), run
        if run in self.dies:
            raise BrokenProcessPool("A child process terminated abruptly")
        future.set_result(AdapterVerdict(None, "checked", path))
        return future


class Parking(threading.Condition):
    """The lane's condition, counting the times a free worker parks: it calls `wait` with the
    lock held right after looking at the queues and finding nothing it may start."""

    def __init__(self) -> None:
        super().__init__()
        self.parked = 0

    def wait(self, timeout: float | None = None) -> bool:
        self.parked += 1
        return super().wait(timeout)

    def looked_again(self) -> None:
        """Wake the parked workers and wait until one has looked at the queues as they are now
        and parked again: what a free worker would have started, it has."""
        with self:
            before = self.parked
            self.notify_all()
        _until(lambda: self.parked > before)


def _job(org: str, run: str) -> HeavyJob:
    fd, path = tempfile.mkstemp(prefix=f"{run}-")
    os.close(fd)
    arch = CATALOGUE_ARCHITECTURES[SMALL_MODEL]
    return HeavyJob(org, run, (run, "k", None), path, SMALL_MODEL, arch, None, None)


def _until(check: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_organizations_take_turns_and_each_check_ends_with_its_run_driven() -> None:
    gate = GatedExecutor()
    driven: list[str] = []
    lane = HeavyChecks(notify=driven.append, executor_factory=lambda: gate, slots=1)
    lane.submit(_job("A", "a1"))
    _until(lambda: gate.started == ["a1"])  # a1 runs; A then queues two more, B one
    for job in (_job("A", "a2"), _job("A", "a3"), _job("B", "b1")):
        lane.submit(job)
    lane.submit(_job("A", "a2"))  # asked twice (a retried message): queued once
    for run in ("a1", "b1", "a2", "a3"):
        gate.end(run)
    _until(lambda: len(driven) == 4)
    assert list(lane.order) == ["a1", "b1", "a2", "a3"]  # B waited for one of A's checks, not three
    assert driven == list(lane.order)
    assert gate.started == driven  # each asked once
    verdict = lane.verdict(("b1", "k", None))
    assert verdict is not None and verdict.reason == "checked"
    assert lane.verdict(("b1", "k", None)) is None  # taken once
    lane.close()


def test_one_organizations_checks_hold_one_slot_and_the_others_go_on_beside_them() -> None:
    gate = GatedExecutor()
    driven: list[str] = []
    cv = Parking()
    lane = HeavyChecks(notify=driven.append, executor_factory=lambda: gate, slots=2, _cv=cv)
    for run in ("a1", "a2", "a3"):  # four zip bombs, say
        lane.submit(_job("A", run))
    _until(lambda: gate.started == ["a1"])
    cv.looked_again()  # the free slot's worker saw a2 and a3 waiting and parked
    assert gate.started == ["a1"]  # a slot is free, but A already has one
    lane.submit(_job("B", "b1"))
    _until(lambda: gate.started == ["a1", "b1"])  # B waits for none of A's checks
    lane.submit(_job("C", "c1"))
    assert len(lane._threads) == 2  # both slots' workers are in a1's and b1's checks
    assert gate.started == ["a1", "b1"]  # both slots taken: C waits for one to end
    gate.end("b1")
    _until(lambda: gate.started == ["a1", "b1", "c1"])  # C before A's second: A still holds one
    assert driven == ["b1"]
    gate.end("a1")
    _until(lambda: gate.started == ["a1", "b1", "c1", "a2"])
    for run in ("c1", "a2", "a3"):
        gate.end(run)
    _until(lambda: len(driven) == 5)
    assert list(lane.order) == ["a1", "b1", "c1", "a2", "a3"]
    lane.close()


def test_a_child_killed_mid_check_fails_only_that_check_and_its_slot_starts_another() -> None:
    gate = GatedExecutor(dies=frozenset({"a1"}))
    started: list[GatedExecutor] = []
    driven: list[str] = []

    def child() -> GatedExecutor:
        started.append(gate)
        return gate

    lane = HeavyChecks(notify=driven.append, executor_factory=child, slots=2)
    lane.submit(_job("A", "a1"))
    lane.submit(_job("B", "b1"))
    _until(lambda: sorted(gate.started) == ["a1", "b1"])
    assert len(started) == 2  # each slot's child starts with the lane
    gate.end("a1")  # A's child dies (killed for memory, say)
    _until(lambda: driven == ["a1"])
    failed = lane.verdict(("a1", "k", None))
    assert failed is not None and failed.reason == "adapter_check_failed", failed
    assert "terminated abruptly" in failed.detail
    _until(lambda: len(started) == 3)  # its slot starts a new child at once
    gate.end("b1")  # B's check, beside it, ends as if nothing happened
    _until(lambda: driven == ["a1", "b1"])
    checked = lane.verdict(("b1", "k", None))
    assert checked is not None and checked.reason == "checked"
    lane.submit(_job("A", "a2"))  # and A's next check is checked, not refused
    gate.end("a2")
    _until(lambda: driven == ["a1", "b1", "a2"])
    again = lane.verdict(("a2", "k", None))
    assert again is not None and again.reason == "checked"
    lane.close()


class SlowChild(GatedExecutor):
    """A child that says whether the lane shut it down."""

    def __init__(self) -> None:
        super().__init__()
        self.shut_down = threading.Event()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self.shut_down.set()


def test_a_child_that_finishes_starting_after_the_lane_closed_is_shut_down() -> None:
    starting, may_finish = threading.Event(), threading.Event()
    children: list[SlowChild] = []

    def child() -> SlowChild:
        starting.set()
        assert may_finish.wait(10)
        children.append(SlowChild())
        return children[-1]

    lane = HeavyChecks(notify=lambda _run: None, executor_factory=child, slots=1)
    lane.submit(_job("A", "a1"))  # the slot starts its child, which takes its time
    assert starting.wait(10)
    lane.close()  # the service stops meanwhile
    may_finish.set()
    _until(lambda: len(children) == 1)
    assert children[0].shut_down.wait(10)  # not left running behind the closed lane
    assert children[0].started == []  # and no check was sent to it


def test_a_small_adapter_is_checked_in_line_and_a_heavy_one_aside() -> None:
    objects = FakeObjectStore()
    bucket = objects.buckets["vol1euro"]
    bucket["runs/small/adapter.zip"] = lora_zip(SMALL_MODEL)
    bucket["runs/heavy/adapter.zip"] = largest_zeros_adapter(SMALL_MODEL)
    driven: list[str] = []
    lane = HeavyChecks(notify=driven.append)  # the real child process

    def check(run: str) -> AdapterVerdict | None:
        return lane.check(
            "A",
            run,
            objects,
            LOCATION,
            CREDS,
            f"runs/{run}/adapter.zip",
            base_model=SMALL_MODEL,
            sha256=None,
            size_bytes=None,
        )

    small = check("small")
    assert small is not None and small.ok  # at once
    assert check("heavy") is None  # queued: the run stays verifying
    assert check("heavy") is None  # asked again while it runs: still queued, not twice
    _until(lambda: driven == ["heavy"], timeout=120)
    heavy = check("heavy")
    assert heavy is not None and heavy.reason == "adapter_untrained", heavy
    lane.close()


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_checks_child_leaves_when_its_process_is_killed() -> None:
    """A worker killed with SIGKILL runs no shutdown: its checks' children see their parent
    gone and leave, instead of waiting on their queue for ever."""
    script = (
        "import os, sys, time\n"
        "from application.heavy_checks import _child_process\n"
        "pool = _child_process()\n"
        "print(pool.submit(os.getpid).result(), flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=Path(__file__).parents[3],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _alive(child)
    finally:
        parent.kill()
        parent.wait(10)
    deadline = time.monotonic() + 15
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(child), f"the check's child {child} outlived its killed parent"
