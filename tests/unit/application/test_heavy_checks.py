"""Issue 14, item 2: heavy adapter checks run one at a time aside, organizations taking turns,
and a small adapter is still checked at once, in line."""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
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
    """Runs nothing: each check waits for the test to let it end, and says which file it had."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.release = threading.Semaphore(0)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()
        path = str(args[0])
        self.started.append(os.path.basename(path))
        self.release.acquire()
        future.set_result(AdapterVerdict(None, "checked", path))
        return future


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
    lane = HeavyChecks(notify=driven.append, executor_factory=lambda: gate)
    lane.submit(_job("A", "a1"))
    _until(lambda: len(gate.started) == 1)  # a1 runs; A then queues two more, B one
    for job in (_job("A", "a2"), _job("A", "a3"), _job("B", "b1")):
        lane.submit(job)
    lane.submit(_job("A", "a2"))  # asked twice (a retried message): queued once
    for _ in range(4):
        gate.release.release()
    _until(lambda: len(driven) == 4)
    assert list(lane.order) == ["a1", "b1", "a2", "a3"]  # B waited for one of A's checks, not three
    assert driven == list(lane.order)
    verdict = lane.verdict(("b1", "k", None))
    assert verdict is not None and verdict.reason == "checked"
    assert lane.verdict(("b1", "k", None)) is None  # taken once
    lane.close()


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
