"""No Pod bills unseen (R5, R8): what the reactor and the reconciler do about a Pod whose trainer
never reports, or stops reporting (docs/runpod.md, What happens on each failure).

- A Pod with no report on any channel (callback, mailbox, Pod logs) within the boot deadline
  after its creation never ran the trainer, and neither did one whose container RunPod says
  failed (`POD_ERROR`) before training started. RunPod's last lines of the Pod's log say why
  (`domain.boot`: an image that cannot be pulled, a host whose driver is too old for the
  image's CUDA); they go into the run's log, and the run's boot fails (`Run.fail_boot`): the
  Pod is terminated, since nothing was written, and confirmed gone like every termination
  (K2, K3); then the run ends failed with that reason.
- A trainer that trained and then went silent on every channel for the stall time is stopped
  and retained (`Run.record_stalled`): its checkpoints may be the only copy.

Both are decided level-triggered on the run, like everything the reactor does: a repeated tick
finds the decision made, and a crash between reading the logs and saving repeats both.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

from application.pod_logs import POD_LOGS
from application.ports import PodLogLine, PodLogSource
from application.report_reads import ReportReads
from application.run_settings import RunSettings
from application.trainer_callbacks import VIA_POD_LOGS, TrainerCallbacks
from domain.base import SYSTEM
from domain.boot import boot_failure
from domain.run import POD_RUNNING, TRAINING, Run

log = logging.getLogger("tensorant.runs")


@dataclass(frozen=True)
class Silence:
    """When a run's Pod counts as never having started its trainer, or its trainer as silent."""

    boot_deadline: timedelta
    stall_after: timedelta

    @classmethod
    def of(cls, settings: RunSettings) -> Silence:
        """The deadline is acted on at the last reconcile tick before it (ticks come every
        `reconcile_interval_s`), so a Pod that never starts bills no longer than the deadline;
        never earlier than half of it, so a rare tick cannot fail a boot that is still pulling."""
        deadline = settings.boot_deadline_s
        early = max(deadline - settings.reconcile_interval_s, deadline / 2)
        return cls(timedelta(seconds=early), timedelta(seconds=settings.stall_after_s))

    def possible(self, run: Run, now: datetime) -> bool:
        """Whether either could be due now, judged on the run alone (no report is read)."""
        if run.state not in TRAINING or run.pod_status != POD_RUNNING or run.started_at is None:
            return False
        return run.stop_reason is None and now - run.started_at >= min(
            self.boot_deadline, self.stall_after
        )


@dataclass(frozen=True)
class BootWatch:
    """Reads a failed boot's reason from RunPod's Pod logs and decides it on the run."""

    trainer: TrainerCallbacks
    reads: ReportReads
    logs: PodLogSource | None = None  # RunPod's Pod logs (REST v2); None: none to read
    tail: int = 50  # the Pod's last lines read and kept in the run's log
    wait_s: float = 2.0  # how long RunPod's log stream is read for them

    def last_report_at(self, run: Run) -> datetime | None:
        return self.reads.last_report_at(run)

    def fail_boot(self, run: Run, key: str, why: str, at: datetime) -> None:
        """`run.fail_boot` with the reason its Pod's last log lines give (else
        `trainer_never_started`, with `why` as the detail); the lines join the run's log."""
        pod_id = run.pod_id or ""
        lines = self.last_lines(key, pod_id)
        reason, detail = boot_failure([line.line for line in lines])
        self._keep(str(run.id), lines, at)
        run.fail_boot(reason, detail or why, SYSTEM, at)
        log.warning(
            "run %s pod %s never ran the trainer (%s): %s",
            run.id,
            pod_id,
            reason,
            detail or why,
            extra={"run_id": str(run.id), "pod_id": pod_id, "reason": reason},
        )

    def last_lines(self, key: str, pod_id: str) -> list[PodLogLine]:
        """The Pod's last `tail` log lines (system and container), oldest first; [] when RunPod
        keeps none, has no log API here, or does not answer. RunPod's stream sends them at once
        and then follows the Pod, so it is read on a thread for at most `wait_s`; the thread
        ends with the stream, at the Pod's termination at the latest."""
        source = self.logs
        if source is None:
            return []
        got: list[PodLogLine] = []

        def read() -> None:
            try:
                for line in source.pod_logs(key, pod_id, None, self.tail):
                    got.append(line)
                    if len(got) >= self.tail:
                        return
            except Exception as e:  # no lines is an answer too: the reason falls back
                log.info("reading the last log lines of pod %s failed: %s", pod_id, e)

        reader = threading.Thread(target=read, daemon=True, name=f"pod-tail-{pod_id[:8]}")
        reader.start()
        reader.join(self.wait_s)
        return list(got)

    def _keep(self, run_id: str, lines: list[PodLogLine], at: datetime) -> None:
        """The lines into the run's log, but those the run's Pod-log follower stored already
        (REST v2 event ids, `<time>/<sequence>`, sort as text). The follower's cursor is left
        alone: a follower still reading may store a line in flight twice, never lose one."""
        reports = self.trainer.reports
        cursor = str((reports.get_state(run_id, POD_LOGS) or {}).get("last_event_id") or "")
        fresh = [line for line in lines if not (cursor and line.id and line.id <= cursor)]
        if not fresh:
            return
        reports.append_reports(
            run_id, [(None, None, line.time or at, line.line) for line in fresh], VIA_POD_LOGS
        )
