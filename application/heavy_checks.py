"""Heavy adapter checks kept away from everyone else's work.

An adapter whose zip members declare more than `HEAVY_BYTES` (a large real adapter, or the
largest zip bomb the verifier's limits let through to inflation) is not checked on the thread
that drives the run: it is queued here and the run stays `verifying`. Checks run in child
processes (so they hold neither a worker thread nor this process's GIL), `SLOTS` at a time and
at most one per organization, and the queue is fair between organizations: of those with no
check running, the one served longest ago goes next. So one organization's many heavy checks
(four zip bombs) take one slot and leave the others to everyone else: another organization's
check waits for none of them while a slot is free, and for at most one check of each other
organization when none is. Launches, stops and terminations never wait for any of it; small
adapters (nearly all) are still checked at once, in line. When a check ends, `notify(run_id)`
drives the run again, and the drive reads the verdict.

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
import time
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
SLOTS = 2  # child processes; one organization's checks hold at most one of them

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


def _exit_with(parent: int, every_s: float = 1.0) -> None:
    """In a check's child: leave when `parent` is gone. A worker killed with SIGKILL (or for
    memory) runs no shutdown, and its children would wait on their queue for ever."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os._exit(0)

    threading.Thread(target=watch, name="tensorant-parent-watch", daemon=True).start()


def _child_process() -> Executor:
    """One child of its own per slot: a child killed (e.g. for memory) breaks its own pool, so
    it fails only the check it had, never another organization's beside it."""
    pool = ProcessPoolExecutor(
        max_workers=1,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_exit_with,
        initargs=(os.getpid(),),
    )
    pool.submit(os.getpid).result()  # started now, not when a check would wait for it
    return pool


@dataclass
class HeavyChecks:
    notify: Callable[[str], object] = lambda _run_id: None
    executor_factory: Callable[[], Executor] = _child_process
    slots: int = SLOTS
    _cv: threading.Condition = field(default_factory=threading.Condition)
    _queues: dict[str, deque[tuple[int, HeavyJob]]] = field(default_factory=dict)
    _served: dict[str, int] = field(default_factory=dict)  # organization -> when last served
    _count: int = 0  # submissions and services, in order
    _running: set[str] = field(default_factory=set)  # organizations with a check running
    _pending: set[JobKey] = field(default_factory=set)
    _results: dict[JobKey, AdapterVerdict] = field(default_factory=dict)
    _threads: list[threading.Thread] = field(default_factory=list)
    _executors: set[Executor] = field(default_factory=set)
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
            if not self._threads:
                for n in range(self.slots):
                    thread = threading.Thread(target=self._loop, daemon=True, name=f"heavy-{n}")
                    self._threads.append(thread)
                    thread.start()
            self._cv.notify_all()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            executors = list(self._executors)
        for executor in executors:
            executor.shutdown(wait=False, cancel_futures=True)

    def _next(self) -> HeavyJob | None:
        """Of the waiting organizations with no check running, the one served longest ago
        (never served first) has the next check; among equals, the one that asked first."""
        with self._cv:
            while not self._closed and not (ready := self._queues.keys() - self._running):
                self._cv.wait()
            if self._closed:
                return None
            org = min(ready, key=lambda o: (self._served.get(o, -1), self._queues[o][0][0]))
            queue = self._queues[org]
            _, job = queue.popleft()
            if not queue:
                del self._queues[org]
            self._count += 1
            self._served[org] = self._count
            self._running.add(org)
            self.order.append(job.run_id)
            return job

    def _start(self) -> Executor:
        executor = self.executor_factory()
        with self._cv:
            closed = self._closed
            if not closed:
                self._executors.add(executor)
        if closed:  # the lane closed while this child started: it is not left behind
            executor.shutdown(wait=False, cancel_futures=True)
        return executor

    def _try_start(self) -> Executor | None:
        try:
            return self._start()
        except Exception:  # tried again with the slot's next check, which then says why
            log.exception("starting a child for heavy checks")
            return None

    def _retire(self, executor: Executor) -> None:
        with self._cv:
            self._executors.discard(executor)
        executor.shutdown(wait=False, cancel_futures=True)

    def _loop(self) -> None:
        """One slot: its child starts with the lane (the first heavy check), then checks; a
        child that died is replaced at once, not when the next check would wait for it."""
        executor = self._try_start()
        while (job := self._next()) is not None:
            try:
                if executor is None:
                    executor = self._start()
                verdict = executor.submit(
                    verify_file,
                    job.path,
                    job.base_model,
                    job.architecture,
                    job.sha256,
                    job.size_bytes,
                ).result()
            except Exception as e:  # the child died (e.g. killed for memory): refuse, say why
                log.warning("heavy check of run %s failed: %r", job.run_id, e)
                if executor is not None:
                    self._retire(executor)
                executor = None
                verdict = AdapterVerdict(None, "adapter_check_failed", f"the check failed: {e!r}")
            finally:
                os.unlink(job.path)
            with self._cv:
                self._pending.discard(job.key)
                self._results[job.key] = verdict
                self._running.discard(job.org_id)
                self._cv.notify_all()
            try:
                self.notify(job.run_id)
            except Exception:  # the next reconcile tick drives the run anyway
                log.exception("asking to drive run %s after its check failed", job.run_id)
            if executor is None:
                executor = self._try_start()
