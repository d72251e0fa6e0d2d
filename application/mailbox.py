"""The mailbox reader: the trainer's reports read from the organization's storage.

For every run in a training state the reconcile loop reads `runs/<id>/status.json` (the latest
progress, rewritten as a heartbeat), the log chunks `runs/<id>/logs/*.jsonl` it has not read in
full, and `result.json` (the `exported`/`failed` report, the commit marker). Everything goes
through the one report applier, so a report another channel brought first changes nothing:
reading is level-triggered and idempotent. The control plane reads with the storage credentials
it already holds; no inbound connection is needed, with either RunPod API.

K2 at scale, shared polls: the mailbox is the channel of last resort. A run whose reports arrive
by another channel (its Pod log, callbacks) is read only every `sweep_s` (`due`), so a thousand
live runs do not cost thousands of storage reads a pass; a run silent elsewhere for `quiet_s` is
read on every pass, the silence check reads it before it judges, and the log chunks are read
once more when the run leaves training (`drain`), so no line only the mailbox holds is lost.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass
from typing import Any

from application.log import TensorantLog
from application.ports import ObjectStore
from application.report_reads import SEEN
from application.storage import StorageService
from application.trainer_callbacks import VIA_MAILBOX, TrainerCallbacks
from domain.run import TRAINING, Run
from domain.times import iso, parse_iso
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

    def due(self, run_ids: list[str], quiet_s: float, sweep_s: float) -> list[str]:
        """The runs whose mailbox a reconcile pass reads: each one not seen on another channel
        within `quiet_s`, or not read within `sweep_s` (two queries for all of them)."""
        if not run_ids:
            return []
        reports, now = self.trainer.reports, self.trainer.clock.now()
        seen = reports.get_states(run_ids, SEEN)
        read = reports.get_states(run_ids, MAILBOX)

        def within(body: dict[str, Any] | None, field: str, seconds: float) -> bool:
            at = (body or {}).get(field)
            return at is not None and (now - parse_iso(at)).total_seconds() < seconds

        return [
            r
            for r in run_ids
            if (seen.get(r) or {}).get("via") in (None, VIA_MAILBOX)
            or not within(seen.get(r), "at", quiet_s)
            or not within(read.get(r), "read_at", sweep_s)
        ]

    def read(self, run_id: str) -> int:
        """Apply what the run's mailbox holds that was not applied yet; returns the position of
        the last event saved (0 when none)."""
        run = self.log.load(Run, run_id)
        if run.state not in TRAINING:
            return 0
        loc, creds = self.storage.location(run.org_id)
        reports = self.trainer.reports
        state: dict[str, Any] = reports.get_state(run_id, MAILBOX) or {}
        listed = {o.key: o for o in self.objects.list(loc, creds, run_prefix(run_id))}
        lines, chunks = self._unread_lines(run, loc, creds, listed, state)
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
        reports.put_state(
            run_id,
            MAILBOX,
            {"chunks": chunks, "heartbeat": heartbeat, "read_at": iso(self.trainer.clock.now())},
        )
        return position

    def drain(self, run: Run) -> None:
        """The log lines of a run that left training, read once (the channels that brought its
        end may have missed some the mailbox holds; a pass skipped its mailbox since)."""
        run_id = str(run.id)
        reports = self.trainer.reports
        state: dict[str, Any] = reports.get_state(run_id, MAILBOX) or {}
        if state.get("drained"):
            return
        loc, creds = self.storage.location(run.org_id)
        listed = {o.key: o for o in self.objects.list(loc, creds, log_prefix(run_id))}
        lines, chunks = self._unread_lines(run, loc, creds, listed, state)
        if lines:
            self.trainer.apply(run_id, lines, VIA_MAILBOX)
        reports.put_state(run_id, MAILBOX, {**state, "chunks": chunks, "drained": True})

    def _unread_lines(
        self, run: Run, loc: Any, creds: Any, listed: dict[str, Any], state: dict[str, Any]
    ) -> tuple[list[Log], dict[str, int]]:
        """The log chunks' lines not read in full yet, in order, and the chunks' sizes read."""
        run_id = str(run.id)
        chunks: dict[str, int] = dict(state.get("chunks") or {})
        lines: list[Log] = []
        keys = sorted(k for k in listed if k.startswith(log_prefix(run_id)))
        unread = {k for k in keys if chunks.get(k) != listed[k].size}
        had = self._claimed_chunks(run, keys, unread)
        for key in keys:
            if not key.endswith(".jsonl") or chunks.get(key) == listed[key].size:
                continue
            if key in had:  # every report it can hold came by another channel
                chunks[key] = listed[key].size
                continue
            for raw in self.objects.get(loc, creds, key).splitlines():
                report = self._parse(run_id, key, raw)
                if isinstance(report, Log):
                    lines.append(report)
            chunks[key] = listed[key].size
        lines.sort(key=lambda r: (r.time, r.boot, r.seq))
        return lines, chunks

    def _claimed_chunks(self, run: Run, keys: list[str], unread: set[str]) -> set[str]:
        """K2 at scale: the unread chunks (`<boot>-<first seq>.jsonl`) whose every report is
        claimed already, so not fetched: a chunk holds a boot's reports from its first seq up
        to the next chunk's, all of which the Pod's log brought when it is followed (a
        thousand runs' chunks fetched one by one at their end were a worker's CPU). A boot's
        last chunk, whose end is unknown, is always read."""
        run_id = str(run.id)
        starts: dict[str, list[tuple[int, str]]] = {}
        for key in keys:
            boot, _, first = (
                key.removeprefix(log_prefix(run_id)).removesuffix(".jsonl").rpartition("-")
            )
            if boot and first.isdigit():
                starts.setdefault(boot, []).append((int(first), key))
        had: set[str] = set()
        for boot, found in starts.items():
            found.sort()
            pairs = [(f, k, a) for (f, k), (a, _) in itertools.pairwise(found) if k in unread]
            if not pairs:
                continue
            claimed = self.trainer.reports.claimed_seqs(run_id, boot)
            started = run.started_by  # the report that started training: its event's, not a claim
            if started is not None and started.get("boot") == boot:
                claimed.add(int(started["seq"]))
            had.update(k for f, k, a in pairs if all(s in claimed for s in range(f, a)))
        return had

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
