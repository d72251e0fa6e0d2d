"""The mailbox reader: the trainer's reports read from the organization's storage.

For every run in a training state the reconcile loop reads `runs/<id>/status.json` (the latest
progress, rewritten as a heartbeat), the log chunks `runs/<id>/logs/*.jsonl` it has not read in
full, and `result.json` (the `exported`/`failed` report, the commit marker). Everything goes
through the one report applier, so a report another channel brought first changes nothing:
reading is level-triggered and idempotent. The control plane reads with the storage credentials
it already holds; no inbound connection is needed, with either RunPod API.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from application.log import TensorantLog
from application.ports import ObjectStore
from application.storage import StorageService
from application.trainer_callbacks import VIA_MAILBOX, TrainerCallbacks
from domain.run import TRAINING, Run
from trainer.protocol import (
    Exported,
    Failed,
    Log,
    Report,
    ReportError,
    Status,
    bounded_loads,
    log_prefix,
    report_from_json,
    result_key,
    run_prefix,
    status_key,
)

log = logging.getLogger("tensorant.mailbox")
MAILBOX = "mailbox"  # the report store's state: what was read already


def _json(data: bytes) -> Any:
    return bounded_loads(data)


@dataclass(frozen=True)
class MailboxReader:
    log: TensorantLog
    objects: ObjectStore
    storage: StorageService
    trainer: TrainerCallbacks

    def read(self, run_id: str) -> int:
        """Apply what the run's mailbox holds that was not applied yet; returns the position of
        the last event saved (0 when none)."""
        run = self.log.load(Run, run_id)
        if run.state not in TRAINING:
            return 0
        loc, creds = self.storage.location(run.org_id)
        reports = self.trainer.reports
        state: dict[str, Any] = reports.get_state(run_id, MAILBOX) or {}
        chunks: dict[str, int] = dict(state.get("chunks") or {})
        listed = {o.key: o for o in self.objects.list(loc, creds, run_prefix(run_id))}
        lines: list[Log] = []
        for key in sorted(k for k in listed if k.startswith(log_prefix(run_id))):
            if not key.endswith(".jsonl") or chunks.get(key) == listed[key].size:
                continue
            for raw in self.objects.get(loc, creds, key).splitlines():
                report = self._parse(run_id, key, raw)
                if isinstance(report, Log):
                    lines.append(report)
            chunks[key] = listed[key].size
        lines.sort(key=lambda r: (r.time, r.boot, r.seq))
        items: list[Report] = list(lines)
        heartbeat = state.get("heartbeat")
        if status_key(run_id) in listed:
            status = self._status(run_id, self.objects.get(loc, creds, status_key(run_id)))
            if status is not None:
                items.append(status.progress)
                if status.updated_at != heartbeat:
                    heartbeat = status.updated_at
                    self.trainer.mark_seen(run_id, VIA_MAILBOX)
        if result_key(run_id) in listed:
            raw = self.objects.get(loc, creds, result_key(run_id))
            final = self._parse(run_id, "result.json", raw)
            if isinstance(final, Exported | Failed):
                items.append(final)
        position = self.trainer.apply(run_id, items, VIA_MAILBOX) if items else 0
        reports.put_state(run_id, MAILBOX, {"chunks": chunks, "heartbeat": heartbeat})
        return position

    @staticmethod
    def _parse(run_id: str, where: str, raw: bytes) -> Report | None:
        if not raw.strip():
            return None
        try:
            return report_from_json(_json(raw))
        except (ValueError, ReportError) as e:
            log.warning("run %s: unreadable report in %s: %s", run_id, where, e)
            return None

    @staticmethod
    def _status(run_id: str, raw: bytes) -> Status | None:
        try:
            return Status.from_json(_json(raw))
        except (ValueError, ReportError) as e:
            log.warning("run %s: unreadable status.json: %s", run_id, e)
            return None
