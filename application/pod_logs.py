"""The Pod-log follower: RunPod's Pod logs (REST v2 SSE) as a report channel.

Every worker scans the live runs now and then (`scan`); for each run in a training state with a
Pod it takes the run's lease (one follower per run across all workers) while it has fewer than
`max_followers` running, and follows the Pod's logs on a thread: `TENSORANT-REPORT` lines go to
the one report applier (applied once per `(boot, seq)`, whichever channel brings it first),
other lines become the run's log lines, so logs exist even when no callback ever arrives (an
import crash, the image pull). The last event id is kept after each line; a dropped stream or a
worker that died resumes with `Last-Event-ID`. Errors and 429 back off (doubling, capped, at
least the answer's Retry-After; the REST adapter also paces the key's quota). A follower ends
`drain_s` after its run left the training states (what the Pod printed last is read too).

What the followers of a worker read is written in batches (R6 at scale): lines wait up to
`flush_s` in memory and each batch, every run's lines and cursors, is one transaction
(`ReportStore.append_many`), where a line cost three (its claim and lines, "seen", the cursor).
A batch holding any other report (progress, outcome) is applied run by run, as before, since
those drive commands. A stream is flushed before it is reopened and when a follower ends, and
the cursor a reopened stream resumes from is the last event read, so nothing is lost or doubled.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from application import errors
from application.connections import ConnectionService
from application.log import TensorantLog
from application.ports import Lease, Leases, PodLogLine, PodLogSource, RunIndex
from application.trainer_callbacks import VIA_POD_LOGS, Item, TrainerCallbacks
from domain.errors import NotFound
from domain.run import TRAINING, Run
from trainer.protocol import Log, Report, parse_report_line

log = logging.getLogger("tensorant.pod_logs")
POD_LOGS = "pod_logs"  # the report store's state: the stream's last event id
DRAINED = "pod_logs_drained"  # the run left training and its Pod's log was read out
STATE_CHECK_S = 2.0
DONE_RECHECK_S = 30.0  # a read-out run still live (its Pod kept) is looked at this often


@dataclass
class PodLogFollowers:
    log: TensorantLog
    source: PodLogSource
    connections: ConnectionService
    trainer: TrainerCallbacks
    runs: RunIndex
    leases: Leases
    max_followers: int = 32
    max_backoff_s: float = 30.0
    sleep: Callable[[float], None] = time.sleep
    drain_s: float = 10.0  # how long a follower reads on after its run left training
    monotonic: Callable[[], float] = time.monotonic
    # How long read lines may wait to be written with others (0: each line at once).
    flush_s: float = 0.25
    _left: dict[str, float] = field(default_factory=dict)  # run id -> when it left training
    _threads: dict[str, threading.Thread] = field(default_factory=dict)
    _guard: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _pending: dict[str, list[PodLogLine]] = field(default_factory=dict)
    _pending_since: float | None = None
    _pending_guard: threading.Lock = field(default_factory=threading.Lock)
    _flush_lock: threading.Lock = field(default_factory=threading.Lock)  # one batch at a time
    _read_to: dict[str, str] = field(default_factory=dict)  # run id -> last event id read
    _done_until: dict[str, float] = field(default_factory=dict)  # read-out runs: skip till
    _flusher: threading.Thread | None = None

    # ------------------------------------------------------------ the scan
    def scan(self) -> list[str]:
        """Start a follower for each training run nobody follows, up to the bound; returns the
        runs this worker started following."""
        started: list[str] = []
        self._start_flusher()
        now = self.monotonic()
        self._done_until = {k: t for k, t in self._done_until.items() if t > now}
        for _org, run_id in self.runs.live_runs():
            with self._guard:
                self._threads = {k: t for k, t in self._threads.items() if t.is_alive()}
                if run_id in self._threads or len(self._threads) >= self.max_followers:
                    continue
            if run_id in self._done_until:
                continue
            # The lease first (one lock attempt on the process's session), the run after: at
            # scale most live runs are another worker's, and loading each of them on every
            # scan to learn so was most of a worker's CPU (K2 at scale).
            try:
                lease = self.leases.try_take(f"pod-logs:{run_id}")
            except Exception as e:  # e.g. PostgreSQL has no connection left for another lease
                log.warning("no lease for following run %s now: %s", run_id, e)
                break  # the runs already followed go on; the next scan tries again
            if lease is None:
                continue  # another worker follows it
            if not self._trainable(run_id):
                lease.release()
                continue
            thread = threading.Thread(
                target=self._follow_leased,
                args=(run_id, lease),
                daemon=True,
                name=f"pod-logs-{run_id[:8]}",
            )
            with self._guard:
                self._threads[run_id] = thread
            thread.start()
            started.append(run_id)
        return started

    def following(self) -> list[str]:
        with self._guard:
            return [k for k, t in self._threads.items() if t.is_alive()]

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        for thread in list(self._threads.values()):
            thread.join(timeout / max(len(self._threads), 1))
        if self._flusher is not None:
            self._flusher.join(timeout)
        try:
            self.flush()  # what was read is kept
        except Exception:
            log.exception("writing the last Pod-log lines read failed")

    def _start_flusher(self) -> None:
        with self._guard:
            if self._flusher is not None or self.flush_s <= 0:
                return
            self._flusher = threading.Thread(
                target=self._flush_forever, daemon=True, name="pod-logs-flush"
            )
        self._flusher.start()

    def _flush_forever(self) -> None:
        while not self._stop.wait(self.flush_s):
            try:
                self.flush()
            except Exception:  # the lines stay pending; the next flush tries again
                log.exception("writing Pod-log lines failed")

    def run_forever(self, interval: float) -> None:
        """A worker's scanning loop (a daemon thread) until `stop`."""
        while not self._stop.is_set():
            try:
                self.scan()
            except Exception:
                log.exception("scanning runs for Pod-log following failed")
            self._stop.wait(interval)

    # ------------------------------------------------------------ one run
    def _trainable(self, run_id: str) -> bool:
        """A run in a training state with a Pod; or one that left them before any follower
        read its Pod's last lines (a trainer that died at once): it is read once, for
        `drain_s`, and then marked done."""
        try:
            run = self.log.load(Run, run_id)
        except NotFound:
            return False
        if run.pod_id is None:
            return False
        if run.state in TRAINING:
            return True
        if self.trainer.reports.get_state(run_id, DRAINED) is None:
            return True
        # Read out; live only while its Pod is kept or released: looked at again in a while
        self._done_until[run_id] = self.monotonic() + DONE_RECHECK_S
        return False

    def _follow_leased(self, run_id: str, lease: Lease) -> None:
        log.info("following the Pod logs of run %s", run_id, extra={"run_id": run_id})
        try:
            self.follow(run_id)
            self.flush()
            if not self._stop.is_set():  # it ended because the run moved on and was read out
                self.trainer.reports.put_state(run_id, DRAINED, {"drained": True})
        except Exception:
            log.exception("following the Pod logs of run %s failed", run_id)
        finally:
            self._read_to.pop(run_id, None)
            lease.release()

    def follow(self, run_id: str) -> None:
        """Follow until the run has left the training states for `drain_s` (or the process
        stops): lines the Pod printed before its final report may still be unread when the run
        moves on (a cut stream being resumed), so the follower reads on for a bounded while."""
        backoff = 0.0
        while not self._stop.is_set():
            run = self._peek(run_id)
            if run.pod_id is None or self._drained(run_id, run.state):
                return
            try:
                key = self.connections.runpod_key(run.org_id)
                read = self._stream(run_id, key, run.pod_id)
                backoff = 0.0
                # A stream that ended after bringing lines was cut: reopen it at once (the Pod
                # may be released within the second); one that brought nothing waits a second.
                wait = 0.0 if read else 1.0
            except errors.ProviderError as e:
                backoff = min(self.max_backoff_s, max(1.0, backoff * 2))
                retry_after = e.extra.get("retry_after_s")
                wait = max(
                    backoff, float(retry_after) if isinstance(retry_after, int | float) else 0
                )
                log.info("Pod-log stream of run %s: %s; again in %.1f s", run_id, e.detail, wait)
            if self._stop.wait(0) or self._drained(run_id):
                return
            self.sleep(wait)

    def _peek(self, run_id: str) -> Run:
        """The run, to read only: one read of its version, the run itself read again only
        when it changed (each follower looks every STATE_CHECK_S; a full load each time was a
        good part of a followed line's cost)."""
        (run,) = self.log.peek((Run, run_id, None))
        if not isinstance(run, Run):
            raise NotFound(f"run {run_id} not found")
        return run

    def _drained(self, run_id: str, state: str | None = None) -> bool:
        """True once the run has been out of the training states for `drain_s`."""
        if state is None:
            state = self._peek(run_id).state
        if state in TRAINING:
            self._left.pop(run_id, None)
            return False
        left = self._left.setdefault(run_id, self.monotonic())
        if self.monotonic() - left < self.drain_s:
            return False
        self._left.pop(run_id, None)
        return True

    def _stream(self, run_id: str, key: str, pod_id: str) -> int:
        """Read the stream's events until it ends; how many it brought. What it read is
        written before this returns, whether the stream ended or broke."""
        last = self._read_to.get(run_id)
        if last is None:
            last = (self.trainer.reports.get_state(run_id, POD_LOGS) or {}).get("last_event_id")
        checked = time.monotonic()
        read = 0
        try:
            for event in self.source.pod_logs(key, pod_id, last):
                self._add(run_id, event)
                read += 1
                if time.monotonic() - checked > STATE_CHECK_S:
                    checked = time.monotonic()
                    if self._stop.is_set() or self._drained(run_id):
                        return read
        finally:
            if read:
                self.flush()
        return read

    def _add(self, run_id: str, event: PodLogLine) -> None:
        """Keep a read line for the next batch (written at once when `flush_s` is 0; without
        the flusher thread, when the batch has waited `flush_s`)."""
        now = self.monotonic()
        with self._pending_guard:
            self._pending.setdefault(run_id, []).append(event)
            if event.id:
                self._read_to[run_id] = event.id
            if self._pending_since is None:
                self._pending_since = now
            due = self.flush_s <= 0 or now - self._pending_since >= self.flush_s
        # With the flusher thread running, it writes the batch: followers that flushed when
        # due queued up on the flush lock, one after another, for nothing to write.
        if due and (self._flusher is None or not self._flusher.is_alive()):
            self.flush()

    def flush(self) -> None:
        """Write every run's pending lines and cursors: one transaction for the runs whose
        lines are log lines only, `apply` for each run whose lines hold another report. A
        failed write puts the lines back, ahead of any read since, for the next flush."""
        with self._flush_lock:
            with self._pending_guard:
                pending, self._pending, self._pending_since = self._pending, {}, None
            if not pending:
                return
            try:
                self.apply_many(pending)
            except BaseException:
                with self._pending_guard:
                    for run_id, events in self._pending.items():
                        pending.setdefault(run_id, []).extend(events)
                    self._pending = pending
                    self._pending_since = self._pending_since or self.monotonic()
                raise

    def apply_many(self, pending: dict[str, list[PodLogLine]]) -> None:
        """Report lines to the applier, other lines as log lines; then the cursors."""
        now = self.trainer.clock.now()
        lines: dict[str, list[Item]] = {}
        cursors: dict[str, dict[str, dict[str, Any]]] = {}
        for run_id, events in pending.items():
            items: list[Item] = []
            for e in events:
                report = parse_report_line(e.line)
                items.append(report if report is not None else (e.time or now, e.line))
            last = next((e.id for e in reversed(events) if e.id), None)
            if all(not isinstance(i, Report) or isinstance(i, Log) for i in items):
                lines[run_id] = items
                if last:
                    cursors[run_id] = {POD_LOGS: {"last_event_id": last}}
                continue
            self.trainer.apply(run_id, items, VIA_POD_LOGS)  # progress and outcomes drive runs
            if last:
                self.trainer.reports.put_state(run_id, POD_LOGS, {"last_event_id": last})
        if lines:
            self.trainer.apply_lines(lines, VIA_POD_LOGS, cursors)

    def apply(self, run_id: str, events: list[PodLogLine]) -> None:
        """Report lines to the applier, other lines as log lines; then the cursor."""
        if events:
            self.apply_many({run_id: events})
