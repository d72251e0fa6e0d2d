"""Heavy adapter checks kept away from everyone else's work (issue 14, item 2).

An adapter whose zip members declare more than `HEAVY_BYTES` (a large real adapter, or the
largest zip bomb the verifier's limits let through to inflation) is not checked on the thread
that drives the run: it is queued here and the run stays `verifying`. One check at a time runs
in a child process (so it holds neither a worker thread nor this process's GIL), and the queue
is fair between organizations: the one served longest ago goes next, so one organization's many
heavy checks delay another's by at most one check. Launches, stops and terminations never wait
for any of it; small adapters (nearly all) are still checked at once, in line. When a check
ends, `notify(run_id)` drives the run again, and the drive reads the verdict.

Why a lane of its own and not a priority on the broker: the broker's messages are the run's
state machine (cheap, idempotent, retried); a check that may inflate gigabytes is of another
kind, and only needs fairness among the organizations that asked for one.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import tempfile
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import BinaryIO

from application.adapter_check import (
    AdapterVerdict,
    declared_bytes,
    verify_file,
    verify_stored_adapter,
)
from application.ports import ObjectStore, S3Credentials, StorageLocation
from domain.lora import Architecture

log = logging.getLogger("tensorant.heavy_checks")
HEAVY_BYTES = 64 * 1024 * 1024

JobKey = tuple[str, str, str | None]  # (run id, object key, sha256 reported)


@dataclass(frozen=True)
class HeavyJob:
    org_id: str
    run_id: str
    key: JobKey
    path: str  # the downloaded zip, a temporary file this lane deletes
    base_model: str
    architecture: Architecture
    sha256: str | None
    size_bytes: int | None


def _process_pool() -> Executor:
    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))


@dataclass
class HeavyChecks:
    notify: Callable[[str], object] = lambda _run_id: None
    executor_factory: Callable[[], Executor] = _process_pool
    _cv: threading.Condition = field(default_factory=threading.Condition)
    _queues: dict[str, deque[tuple[int, HeavyJob]]] = field(default_factory=dict)
    _served: dict[str, int] = field(default_factory=dict)  # organization -> when last served
    _count: int = 0  # submissions and services, in order
    _pending: set[JobKey] = field(default_factory=set)
    _results: dict[JobKey, AdapterVerdict] = field(default_factory=dict)
    _thread: threading.Thread | None = None
    _executor: Executor | None = None
    _closed: bool = False
    # The latest run ids in the order they were checked (what an operator or a test reads).
    order: deque[str] = field(default_factory=lambda: deque(maxlen=100))

    def check(
        self,
        org_id: str,
        run_id: str,
        objects: ObjectStore,
        location: StorageLocation,
        creds: S3Credentials,
        key: str,
        *,
        base_model: str,
        sha256: str | None,
        size_bytes: int | None,
    ) -> AdapterVerdict | None:
        """The verdict now (a small adapter, or a heavy check that has ended), or None while a
        heavy check is queued or running (it is queued by this call if it was not)."""
        job_key: JobKey = (run_id, key, sha256)
        done = self.verdict(job_key)
        if done is not None:
            return done
        if self.queued(job_key):
            return None

        def defer(stream: BinaryIO, architecture: Architecture) -> bool:
            if declared_bytes(stream) <= HEAVY_BYTES:
                return False
            fd, path = tempfile.mkstemp(prefix="tensorant-adapter-", suffix=".zip")
            with os.fdopen(fd, "wb") as f:
                stream.seek(0)
                while chunk := stream.read(1 << 20):
                    f.write(chunk)
            self.submit(
                HeavyJob(
                    org_id, run_id, job_key, path, base_model, architecture, sha256, size_bytes
                )
            )
            return True

        return verify_stored_adapter(
            objects,
            location,
            creds,
            key,
            base_model=base_model,
            sha256=sha256,
            size_bytes=size_bytes,
            defer=defer,
        )

    def verdict(self, key: JobKey) -> AdapterVerdict | None:
        """The verdict of a finished check (taken once), else None."""
        with self._cv:
            return self._results.pop(key, None)

    def queued(self, key: JobKey) -> bool:
        with self._cv:
            return key in self._pending

    def submit(self, job: HeavyJob) -> None:
        """Queue a check (once per key); the organization joins the turns if it is not in."""
        with self._cv:
            if job.key in self._pending or job.key in self._results or self._closed:
                os.unlink(job.path)
                return
            self._pending.add(job.key)
            self._count += 1
            self._queues.setdefault(job.org_id, deque()).append((self._count, job))
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, daemon=True, name="heavy")
                self._thread.start()
            self._cv.notify_all()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)

    def _next(self) -> HeavyJob | None:
        """The waiting organization served longest ago (never served first) has the next
        check; among equals, the one that asked first."""
        with self._cv:
            while not self._queues and not self._closed:
                self._cv.wait()
            if self._closed:
                return None
            org = min(self._queues, key=lambda o: (self._served.get(o, -1), self._queues[o][0][0]))
            queue = self._queues[org]
            _, job = queue.popleft()
            if not queue:
                del self._queues[org]
            self._count += 1
            self._served[org] = self._count
            return job

    def _loop(self) -> None:
        while (job := self._next()) is not None:
            self.order.append(job.run_id)
            try:
                if self._executor is None:
                    self._executor = self.executor_factory()
                verdict = self._executor.submit(
                    verify_file,
                    job.path,
                    job.base_model,
                    job.architecture,
                    job.sha256,
                    job.size_bytes,
                ).result()
            except Exception as e:  # the child died (e.g. killed for memory): refuse, say why
                log.warning("heavy check of run %s failed: %r", job.run_id, e)
                self._executor = None
                verdict = AdapterVerdict(None, "adapter_check_failed", f"the check failed: {e!r}")
            finally:
                os.unlink(job.path)
            with self._cv:
                self._pending.discard(job.key)
                self._results[job.key] = verdict
            try:
                self.notify(job.run_id)
            except Exception:  # the next reconcile tick drives the run anyway
                log.exception("asking to drive run %s after its check failed", job.run_id)
