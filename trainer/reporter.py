"""One report, three channels (T1): stdout lines, the mailbox, and callbacks when they answer.

`emit` only appends to memory and prints one line; the mailbox and callbacks are written by
background threads, so slow storage or a hanging callback URL never holds up a training step.
The final report (`exported`/`failed`) is recorded on the volume first, then `result.json` is
written last, as the mailbox's commit marker."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from trainer.callbacks import CallbackSender
from trainer.mailbox import Mailbox, write_atomically
from trainer.protocol import (
    Exported,
    Failed,
    Heartbeat,
    Log,
    Progress,
    Report,
    Status,
    format_report_line,
    report_from_json,
)
from trainer.protocol.reports import clip_log_text, dumps, new_boot_id, utc_now

MAX_CHUNK_LINES = 1000


class Reporter:
    def __init__(
        self,
        run_id: str,
        mailbox: Mailbox | None,
        *,
        callbacks: CallbackSender | None = None,
        final_record: Path | None = None,
        heartbeat_s: float = 30.0,
        progress_s: float = 5.0,
        log_flush_s: float = 5.0,
        attempt: int = 1,
        out: TextIO | None = None,
        boot: str | None = None,
    ) -> None:
        self.run_id = run_id
        self.boot = boot or new_boot_id()
        self.attempt = attempt
        self._mailbox = mailbox
        self._callbacks = callbacks
        self._final_record = final_record
        self._heartbeat_s = heartbeat_s
        self._progress_s = progress_s
        self._log_flush_s = log_flush_s
        self._out = out
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._seq = 0
        self._progress = Progress(
            boot=self.boot, seq=0, time=utc_now(), phase="loading", step=0, total_steps=0
        )
        self._status_dirty = True
        self._pending_logs: list[Log] = []
        self._pending_since = 0.0
        self._last_progress_at = -1e9
        self._last_activity = utc_now()
        self._stopping = False
        self.max_emit_s = 0.0  # the longest any emit took: tests hold it to milliseconds
        self.mailbox_errors = 0
        self._pod_id = os.environ.get("RUNPOD_POD_ID")
        # Started by the first report: a restarted trainer that only shows its final report
        # again (redeliver) must not rewrite status.json.
        self._pump = threading.Thread(target=self._run_pump, name="tensorant-mailbox", daemon=True)

    # ------------------------------------------------------------------ emitting

    def _next(self, build: Callable[[int, str], Report]) -> Report:
        with self._lock:
            self._seq += 1
            return build(self._seq, utc_now())

    def _emit(self, report: Report) -> Report:
        started = time.perf_counter()
        if not self._pump.is_alive() and not self._stopping:
            with self._lock:
                if not self._pump.is_alive() and not self._stopping and self._pump.ident is None:
                    self._pump.start()
        out = self._out or sys.stdout
        print(format_report_line(report), file=out, flush=True)
        with self._lock:
            if isinstance(report, Log):
                if not self._pending_logs:
                    self._pending_since = time.monotonic()
                self._pending_logs.append(report)
                if len(self._pending_logs) >= MAX_CHUNK_LINES:
                    self._wake.notify()
            elif isinstance(report, Progress):
                self._progress = report
                self._status_dirty = True
                self._wake.notify()
        if self._callbacks is not None:
            self._callbacks.publish(report)
        self.max_emit_s = max(self.max_emit_s, time.perf_counter() - started)
        return report

    def log(self, text: str) -> None:
        self._emit(
            self._next(lambda s, t: Log(boot=self.boot, seq=s, time=t, text=clip_log_text(text)))
        )

    def tick(self) -> None:
        """The training process is alive and moving (status.json's last_activity_at)."""
        self._last_activity = utc_now()

    def progress(
        self,
        phase: str,
        step: int,
        total_steps: int,
        *,
        loss: float | None = None,
        learning_rate: float | None = None,
        tokens_per_s: float | None = None,
        epoch: float | None = None,
        grad_norm: float | None = None,
        eval_loss: float | None = None,
        bytes_done: int | None = None,
        bytes_total: int | None = None,
        force: bool = False,
    ) -> bool:
        """Emit progress unless one went out less than `progress_s` ago; True when emitted."""
        self.tick()
        now = time.monotonic()
        if (
            not force
            and phase == self._progress.phase
            and now - self._last_progress_at < self._progress_s
        ):
            return False
        self._last_progress_at = now
        self._emit(
            self._next(
                lambda s, t: Progress(
                    boot=self.boot,
                    seq=s,
                    time=t,
                    phase=phase,
                    step=step,
                    total_steps=total_steps,
                    loss=loss,
                    learning_rate=learning_rate,
                    tokens_per_s=tokens_per_s,
                    epoch=epoch,
                    grad_norm=grad_norm,
                    eval_loss=eval_loss,
                    bytes_done=bytes_done,
                    bytes_total=bytes_total,
                )
            )
        )
        return True

    @property
    def last_progress(self) -> Progress:
        return self._progress

    # ------------------------------------------------------------------ the final report

    def exported(self, object_key: str, sha256: str, size_bytes: int, *, partial: bool) -> Exported:
        report = self._next(
            lambda s, t: Exported(
                boot=self.boot,
                seq=s,
                time=t,
                object_key=object_key,
                sha256=sha256,
                size_bytes=size_bytes,
                partial=partial,
            )
        )
        assert isinstance(report, Exported)
        self.finish(report)
        return report

    def failed(self, reason: str, detail: str) -> Failed:
        report = self._next(
            lambda s, t: Failed(boot=self.boot, seq=s, time=t, reason=reason, detail=detail[:5000])
        )
        assert isinstance(report, Failed)
        self.finish(report)
        return report

    def finish(self, report: Exported | Failed) -> None:
        """Deliver the final report: stdout and callbacks, the logs and status still waiting,
        a record on the volume (a restarted trainer finds it), then result.json last."""
        self._emit(report)
        self._stop_pump()
        body = dumps(report.to_json()).encode()
        if self._final_record is not None:
            write_atomically(self._final_record, body)
        if self._mailbox is not None:
            try:
                self._mailbox.write_result(body)
            except OSError as e:
                self.mailbox_errors += 1
                print(
                    f"tensorant-trainer: result.json not written: {e}", file=sys.stderr, flush=True
                )

    def redeliver(self, report: Report) -> None:
        """A restarted trainer that already finished: show the final report again (the same
        boot and seq, so it is applied once) and make sure result.json exists."""
        self._stop_pump()
        print(format_report_line(report), file=self._out or sys.stdout, flush=True)
        if self._mailbox is not None and not self._mailbox.has_result():
            try:
                self._mailbox.write_result(dumps(report.to_json()).encode())
            except OSError as e:
                print(
                    f"tensorant-trainer: result.json not written: {e}", file=sys.stderr, flush=True
                )
        if self._callbacks is not None:
            self._callbacks.publish(report)

    def close(self, callback_wait_s: float = 2.0) -> None:
        """Stop the mailbox pump; give callbacks still queued a bounded time, then stop them.
        (A trainer that idles after its final report need not close: the sender keeps trying.)"""
        self._stop_pump()
        if self._callbacks is not None:
            self._callbacks.drain(callback_wait_s)
            self._callbacks.close()

    # ------------------------------------------------------------------ the mailbox pump

    def _stop_pump(self) -> None:
        with self._lock:
            if self._stopping:
                return
            self._stopping = True
            self._wake.notify()
        if self._pump.ident is not None:
            self._pump.join()

    def _status_body(self) -> bytes:
        status = Status(
            run_id=self.run_id,
            progress=self._progress,
            updated_at=utc_now(),
            last_activity_at=self._last_activity,
            attempt=self.attempt,
            pod_id=self._pod_id,
        )
        return dumps(status.to_json()).encode()

    def _write(self, action: Callable[[bytes], Any], data: bytes) -> None:
        try:
            action(data)
        except OSError as e:
            self.mailbox_errors += 1
            if self.mailbox_errors in (1, 10, 100):
                print(f"tensorant-trainer: mailbox write failed: {e}", file=sys.stderr, flush=True)

    def _run_pump(self) -> None:
        last_status = -1e9
        while True:
            with self._lock:
                now = time.monotonic()
                due = [last_status + self._heartbeat_s]
                if self._pending_logs:
                    due.append(self._pending_since + self._log_flush_s)
                idle = not (self._stopping or self._status_dirty)
                if idle and len(self._pending_logs) < MAX_CHUNK_LINES and min(due) > now:
                    self._wake.wait(min(due) - now)
                stopping = self._stopping
                now = time.monotonic()
                logs: list[Log] = []
                if self._pending_logs and (
                    stopping
                    or now >= self._pending_since + self._log_flush_s
                    or len(self._pending_logs) >= MAX_CHUNK_LINES
                ):
                    logs, self._pending_logs = self._pending_logs, []
                heartbeat = not self._status_dirty and now >= last_status + self._heartbeat_s
                write_status = self._status_dirty or heartbeat or stopping
                self._status_dirty = False
            if heartbeat and not stopping:
                self._emit_heartbeat()
            for i in range(0, len(logs), MAX_CHUNK_LINES):
                self._write_chunk(logs[i : i + MAX_CHUNK_LINES])
            if write_status:
                last_status = time.monotonic()
                body = self._status_body()
                if self._mailbox is not None:
                    self._write(self._mailbox.write_status, body)
            if stopping:
                return

    def _write_chunk(self, chunk: list[Log]) -> None:
        if self._mailbox is None:
            return
        data = "".join(dumps(r.to_json()) + "\n" for r in chunk).encode()
        self._write(lambda d: self._mailbox.write_log_chunk(self.boot, chunk[0].seq, d), data)  # type: ignore[union-attr]

    def _emit_heartbeat(self) -> None:
        report = self._next(lambda s, t: Heartbeat(boot=self.boot, seq=s, time=t))
        print(format_report_line(report), file=self._out or sys.stdout, flush=True)


def read_final_record(path: Path) -> Exported | Failed | None:
    try:
        report = report_from_json(json.loads(path.read_bytes()))
    except (OSError, ValueError):
        return None
    return report if isinstance(report, Exported | Failed) else None
