"""What the training container reports (R6–R8): one applier for every channel.

A report reaches the control plane by a callback (authenticated by a per-run token), through the
mailbox on the organization's storage, or as a `TENSORANT-REPORT` line of the Pod's logs (R6).
Whichever channel brings a `(boot, seq)` first applies it; the others find it claimed (the
report that starts training is claimed by its `TrainingStarted`, every other one in the report
store: `_progress`). Log
lines are claimed and stored in one transaction, so a line is stored once; `exported`/`failed`
drive commands that are idempotent on the run, so a repeat changes nothing. The channel that
brought the latest progress is shown as `progress.via`; when anything last arrived is kept for
the stalled check; what a run shows of it is read by `application.report_reads`.
"""

from __future__ import annotations

import functools
import hmac
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from eventsourcing.persistence import IntegrityError

from application.conflicts import retry_on_conflict
from application.log import Kept, TensorantLog
from application.memory import MemoryReportStore
from application.ports import (
    Clock,
    LogMoved,
    NewerReport,
    ReportLine,
    ReportStore,
    StateChange,
    finite,
)
from application.report_reads import PROGRESS, SEEN
from application.run_settings import RunSettings
from domain.errors import DomainError, NotFound, TensorantError
from domain.run import (
    FOREIGN_ADAPTER_KEY,
    LAUNCHING,
    RUNNING,
    TERMINAL,
    TRAINING,
    Run,
)
from domain.times import iso, parse_iso
from trainer.protocol import (
    BOOT_PHASES,
    METRIC_FIELDS,
    Exported,
    Failed,
    Log,
    Progress,
    Report,
    adapter_key,
    own_adapter_keys,
)

TRAINER = "trainer"  # the actor of every event a trainer's report causes
VIA_CALLBACK, VIA_MAILBOX, VIA_POD_LOGS = "callback", "mailbox", "pod_logs"
CHANNELS = (VIA_CALLBACK, VIA_MAILBOX, VIA_POD_LOGS)

# A Pod-log line, or a log report of any channel: (time, text) or a Log report.
Item = Report | tuple[datetime, str]


class InvalidTrainerToken(NotFound):
    """A token for another run, or none: the run is 'not found' (never confirm it exists)."""

    problem = "not-found"


class TrainerTokenExpired(TensorantError):
    """The run's own token, after the run ended."""

    problem = "token-expired"
    status = 401
    title = "The run has ended; its token no longer works"


class ForeignAdapterKey(DomainError):
    """N2: an `exported` report naming an object other than the run's own adapter key; the
    refusal is recorded on the run (`ExportReportRefused`) before this is answered."""

    problem = "foreign-adapter-key"
    title = "The exported adapter is not at this run's adapter key"

    def __init__(self, detail: str, position: int = 0) -> None:
        super().__init__(detail)
        self.position = position


def _time(value: str, fallback: datetime) -> datetime:
    try:
        return parse_iso(value)
    except ValueError:
        return fallback


@dataclass(frozen=True)
class TrainerCallbacks:
    log: TensorantLog
    clock: Clock
    settings: RunSettings
    reports: ReportStore = field(default_factory=MemoryReportStore)
    # Runs between their reports (`Kept`): a report reads its run's version, not its events.
    # The reactor takes and gives back its runs here too, so the first report after the worker
    # saw a Pod run finds its run kept.
    kept_runs: Kept[Run] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kept_runs", Kept(self.log, Run))

    def token(self, run_id: str) -> str:
        """A per-run token: an HMAC of the run id, useless for any other run or endpoint."""
        return _token(self.settings.trainer_secret or b"tensorant-dev-only", run_id)

    def authenticate(self, run_id: str, token: str, *, check: bool = True) -> Run:
        """The run the token was minted for; any other token finds nothing. A token stops
        working when its run ends: nothing a Pod sends may change an ended run.
        The caller owns the run it gets (`Kept.take`). `check=False`: the kept run, unread
        since the last report, may be older than the log's; the report's claim proves its
        version (`apply`'s `loaded_at_claim`) before anything is decided on it."""
        if not hmac.compare_digest(self.token(run_id), token or ""):
            raise InvalidTrainerToken(f"run {run_id} not found")
        run = self.kept_runs.take(run_id, check=check)
        if run.state in TERMINAL and not check:
            run = self.kept_runs.take(run_id)  # ended by the log's version, not a kept one's
        return _live(run)

    def check_token(self, run_id: str, token: str) -> None:
        """`authenticate`, for a callback that changes nothing in the run."""
        self.kept_runs.give_back(self.authenticate(run_id, token))

    def base_model_of(self, run_id: str, token: str) -> tuple[str, str]:
        """(organization, base model) of the live run the token was minted for (C7)."""
        run = self.authenticate(run_id, token)
        try:
            return run.org_id, str(run.config.base_model)
        finally:
            self.kept_runs.give_back(run)

    # ------------------------------------------------------------ callbacks (authenticated)
    def progress(self, run_id: str, token: str, phase: str, **body: Any) -> int:
        run = self.authenticate(run_id, token, check=False)
        report = Progress(
            **_keyed(body),
            phase=phase,
            step=int(body.get("step") or 0),
            total_steps=int(body.get("total_steps") or 0),
            loss=body.get("loss"),
            learning_rate=body.get("learning_rate"),
            tokens_per_s=body.get("tokens_per_s"),
            epoch=body.get("epoch"),
            grad_norm=body.get("grad_norm"),
            eval_loss=body.get("eval_loss"),
            bytes_done=body.get("bytes_done"),
            bytes_total=body.get("bytes_total"),
        )
        return self.apply(run_id, [report], VIA_CALLBACK, loaded=run, loaded_at_claim=True)

    def exported(
        self,
        run_id: str,
        token: str,
        object_key: str,
        sha256: str,
        size_bytes: int,
        **body: Any,
    ) -> int:
        run = self.authenticate(run_id, token, check=False)
        report = Exported(
            **_keyed(body),
            object_key=object_key,
            sha256=sha256,
            size_bytes=size_bytes,
            partial=bool(body.get("partial", False)),
        )
        position = self.apply(run_id, [report], VIA_CALLBACK, loaded=run, loaded_at_claim=True)
        if object_key not in own_adapter_keys(run_id):
            raise ForeignAdapterKey(
                f"{object_key!r} is not this run's adapter; export to "
                f"{adapter_key(run_id)!r} (the manifest's adapter.object_key)",
                position=position,
            )
        return position

    def failed(self, run_id: str, token: str, reason: str, detail: str, **body: Any) -> int:
        run = self.authenticate(run_id, token, check=False)
        report = Failed(**_keyed(body), reason=reason, detail=detail)
        return self.apply(run_id, [report], VIA_CALLBACK, loaded=run, loaded_at_claim=True)

    def log_lines(
        self, run_id: str, token: str, lines: Sequence[tuple[str | None, int | None, datetime, str]]
    ) -> int:
        """Callback log lines; those with `(boot, seq)` are stored once across channels."""
        self.check_token(run_id, token)
        stored = self.reports.append_reports(run_id, list(lines), VIA_CALLBACK)
        if stored:
            self._seen(run_id, VIA_CALLBACK)
        return stored

    # ------------------------------------------------------------ the one applier
    def apply(
        self,
        run_id: str,
        items: Sequence[Item],
        via: str,
        loaded: Run | None = None,
        *,
        loaded_at_claim: bool = False,
    ) -> int:
        """Apply reports and plain log lines in order, each `(boot, seq)` once; returns the
        position of the last event saved (0 when none). `loaded`: the run as a callback's token
        check just loaded it, used by the first command instead of loading it again.
        `loaded_at_claim`: `loaded` is the kept run, unchecked (`authenticate(check=False)`);
        the first report's claim holds only while the log is at its version (one round trip
        for both on PostgreSQL), and when the log moved on the run is read again, its token
        checked again, and the report claimed as usual."""
        now = self.clock.now()
        lines: list[ReportLine] = []
        others: list[Report] = []
        for item in items:
            if isinstance(item, Log):
                lines.append((item.boot, item.seq, _time(item.time, now), item.text))
            elif isinstance(item, Report):
                others.append(item)
            else:
                lines.append((None, None, item[0], item[1]))
        plain = sum(1 for boot, _seq, _at, _text in lines if boot is None)
        # Plain lines (a Pod's own output) do not count as the trainer reporting: a hung trainer
        # may keep printing while its reports stopped.
        fresh = (self.reports.append_reports(run_id, lines, via) - plain) if lines else 0
        position = 0
        seen_saved = False
        live = loaded_at_claim  # a callback's: its token is void once the run has ended
        for report in others:
            run, unchecked = loaded, loaded_at_claim  # the first report's, then read as needed
            loaded, loaded_at_claim = None, False
            if isinstance(report, Progress):
                if run is None:  # the kept run, unchecked: its save or claim proves it
                    run, unchecked = self.kept_runs.take(run_id, check=False), True
                claimed, saved = self._progress(
                    run_id, report, via, now, run, unchecked=unchecked, live=live
                )
            else:
                claimed, saved = self._outcome(
                    run_id, report, via, now, run, unchecked=unchecked, live=live
                )
            fresh += int(claimed)
            seen_saved = seen_saved or claimed
            position = max(position, saved)
        if fresh and not seen_saved:
            self._seen(run_id, via)
        if loaded is not None:  # no command ran on it: unchanged
            self.kept_runs.give_back(loaded)
        return position

    def apply_lines(
        self,
        batches: dict[str, list[Item]],
        via: str,
        states: dict[str, dict[str, dict[str, Any]]],
    ) -> dict[str, int]:
        """`apply` for many runs whose items are log lines only (trainer `Log` reports and plain
        lines): one write for all, with each run's `states` (a channel's cursor) beside its
        lines; a run whose fresh lines include a trainer's is seen, as `apply` does. Returns
        run id -> lines stored."""
        now = self.clock.now()
        lines: dict[str, list[ReportLine]] = {}
        for run_id, items in batches.items():
            out = lines.setdefault(run_id, [])
            for item in items:
                if isinstance(item, Log):
                    out.append((item.boot, item.seq, _time(item.time, now), item.text))
                elif isinstance(item, Report):
                    msg = "apply_lines takes log lines only; other reports go through apply"
                    raise TypeError(msg)
                else:
                    out.append((None, None, item[0], item[1]))
        return self.reports.append_many(lines, via, states, (SEEN, self._seen_body(via, now)))

    def _progress(
        self,
        run_id: str,
        report: Progress,
        via: str,
        now: datetime,
        run: Run,
        *,
        unchecked: bool,
        live: bool,
    ) -> tuple[bool, int]:
        """Apply a progress report to `run` (which this takes): (claimed, position saved).

        The report that starts training is claimed by its event's save, not by the report
        store: `TrainingStarted` keeps its key and the progress it carried, and a run's view
        shows the newer of that and the store's (`report_statuses`). One write for the report
        that starts a run, where a claim beside the event was a second transaction. The save is
        version-checked: of two channels bringing that report at once, one saves and the other
        finds the run moved on, reads it again and knows the report as a copy; so does any
        later copy, by the run's `started_by`. Every other report is claimed in the report
        store, as before. `unchecked`: `run` is a kept one, unread since its last report; the
        save, or the claim's `while_at`, proves it is still the log's. `live`: a callback's
        report (its token is void once the run has ended, however it is read again)."""
        body = _progress_body(report, via, now)
        if _is_metric_point(report):
            # R17: kept before the claim, once per (boot, seq): a crash between the two loses
            # no point (a copy from another channel, or a retry, writes it then), and a copy
            # arriving after the claim keeps nothing.
            self.reports.add_metric(run_id, report.boot, report.seq, _metric_point(report, now))
        for _attempt in range(3):
            if _is_starting(run, report):  # a copy of the report that started training
                if live and unchecked:  # a callback's answer: 401 if the run ended since
                    run = self._again(run_id, live)
                self.kept_runs.give_back(run)
                return False, 0
            # A boot's report (installing, downloading the model) is a sign of life, not the
            # start of training: a Pod that gets no further is still terminated, not retained.
            boot = report.phase in BOOT_PHASES
            if run.state == RUNNING and not run.training_started and not boot:
                run.start_training(TRAINER, now, report=finite(body))
                if report.phase == "exporting":
                    run.start_export(TRAINER, now)
                try:
                    position = self.log.save_all(run)
                except IntegrityError:  # another writer saved the run first: read it again
                    run, unchecked = self._again(run_id, live), False
                    continue
                self.kept_runs.give_back(run)
                return True, position
            state = _claim_state(self._seen_body(via, now), body)
            while_at = self.log.while_at(run) if unchecked else None
            try:
                claimed = self.reports.claim(run_id, report.boot, report.seq, via, state, while_at)
            except LogMoved:  # the kept run is older than the log's: read it again
                run, unchecked = self._again(run_id, live), False
                continue
            if not claimed:
                self.kept_runs.give_back(run)
                return False, 0
            return True, self._drive(run_id, report, run)
        # the run moved on under every try (busy writers): claim as any report, then decide on
        # the log's run
        state = _claim_state(self._seen_body(via, now), body)
        if not self.reports.claim(run_id, report.boot, report.seq, via, state):
            return False, 0
        return True, self._drive(run_id, report)

    def _outcome(
        self,
        run_id: str,
        report: Report,
        via: str,
        now: datetime,
        run: Run | None,
        *,
        unchecked: bool,
        live: bool,
    ) -> tuple[bool, int]:
        """Apply any report but progress (`run`, when given, is this one's to use): (claimed,
        position saved). A fresh claim records when it arrived in its own transaction. A
        heartbeat drives nothing; an export's outcome drives commands that are idempotent, so
        they run even when another channel claimed it first."""
        state: dict[str, StateChange] = {SEEN: self._seen_body(via, now)}
        while_at = self.log.while_at(run) if run is not None and unchecked else None
        try:
            claimed = self.reports.claim(run_id, report.boot, report.seq, via, state, while_at)
        except LogMoved:  # the kept run is older than the log's: read it again
            run = self._again(run_id, live)
            claimed = self.reports.claim(run_id, report.boot, report.seq, via, state)
        if isinstance(report, Exported | Failed):
            return claimed, self._drive(run_id, report, run)
        if run is not None:  # nothing ran on it: unchanged
            self.kept_runs.give_back(run)
        return claimed, 0

    def _again(self, run_id: str, live: bool) -> Run:
        """The run read again from the log (a callback's: unless it has ended)."""
        run = self.kept_runs.take(run_id)
        return _live(run) if live else run

    def started_by(self, run_id: str) -> dict[str, Any] | None:
        """The report that started the run's training, as its run keeps it (`ReportReads`)."""
        run = self.kept_runs.take(run_id)
        self.kept_runs.give_back(run)
        return run.started_by

    def mark_seen(self, run_id: str, via: str) -> None:
        self._seen(run_id, via)

    def _seen(self, run_id: str, via: str) -> None:
        self.reports.put_state(run_id, SEEN, self._seen_body(via))

    def _seen_body(self, via: str, at: datetime | None = None) -> dict[str, Any]:
        return {"at": iso(at or self.clock.now()), "via": via}

    def _drive(self, run_id: str, report: Report, loaded: Run | None = None) -> int:
        """The run commands a report drives; each is idempotent on the run's state."""
        if loaded is not None:
            try:
                return self._command(loaded, report)
            except IntegrityError:
                pass  # another writer saved the run first: load it and decide again
        return self._load_and_command(run_id, report)

    @retry_on_conflict
    def _load_and_command(self, run_id: str, report: Report) -> int:
        return self._command(self.kept_runs.take(run_id), report)

    def _command(self, run: Run, report: Report) -> int:
        at = self.clock.now()
        if isinstance(report, Progress):
            if run.state not in TRAINING or report.phase in BOOT_PHASES:
                return 0
            run.start_training(TRAINER, at)
            if report.phase == "exporting":
                run.start_export(TRAINER, at)
        elif isinstance(report, Exported):
            same = run.exported is not None and run.exported["sha256"] == report.sha256
            if same or run.state not in TRAINING | {LAUNCHING}:
                return 0
            if report.object_key in own_adapter_keys(str(run.id)):
                run.record_adapter_exported(
                    report.object_key, report.sha256, report.size_bytes, TRAINER, at
                )
            else:  # N2: never verify (or succeed with) an object that is not this run's
                run.refuse_export_report(
                    report.object_key, report.sha256, FOREIGN_ADAPTER_KEY, TRAINER, at
                )
        elif isinstance(report, Failed):
            if run.state not in TRAINING:
                return 0
            run.record_export_failed(
                report.reason or "export_failed", report.detail[:500], TRAINER, at
            )
        position = self.log.save_all(run) if run.pending_events else 0
        self.kept_runs.give_back(run)  # saved or unchanged (a failed save raised)
        return position


@functools.lru_cache(maxsize=4096)
def _token(secret: bytes, run_id: str) -> str:
    """`TrainerCallbacks.token`, kept for the runs reporting lately: the HMAC was ~25 us of a
    report's path on a busy server, more than its whole claim's Python. The tokens are as secret
    as the key beside them in this process's memory. A run's first token is a copy of the keyed
    HMAC (`_keyed_mac`) fed the run id: 11 us against 19 us for `hmac.digest`, which sets the key
    up again on every call (timed in place, SQLite first reports, bench/command_throughput.py).
    The same HMAC-SHA256 either way, so a Pod's token survives an upgrade."""
    mac = _keyed_mac(secret).copy()
    mac.update(f"trainer:{run_id}".encode())
    return mac.hexdigest()


@functools.lru_cache(maxsize=4)
def _keyed_mac(secret: bytes) -> hmac.HMAC:
    """The HMAC-SHA256 keyed with `secret` and fed nothing: only ever copied, never updated."""
    return hmac.new(secret, digestmod="sha256")


def _live(run: Run) -> Run:
    """The run, unless it has ended: then its token is void."""
    if run.state in TERMINAL:
        raise TrainerTokenExpired(f"run {run.id} has ended ({run.state}): its token is void")
    return run


def _is_starting(run: Run, report: Progress) -> bool:
    """Whether `report` is the one that started the run's training (`Run.started_by`)."""
    started = run.started_by
    return started is not None and (started["boot"], started["seq"]) == (report.boot, report.seq)


def _claim_state(seen: dict[str, Any], progress: dict[str, Any]) -> dict[str, StateChange]:
    """What a progress report's fresh claim changes in the report store, in its transaction:
    when the run was last seen, and the progress shown unless a newer report's is."""
    return {SEEN: seen, PROGRESS: NewerReport(progress)}


def _progress_body(report: Progress, via: str, now: datetime) -> dict[str, Any]:
    """The progress to show (`NewerReport`: unless a newer report's is shown already, a late
    copy of an older report does not replace a newer one)."""
    body = report.to_json()
    body.pop("type", None)
    body.update(via=via, received_at=iso(now))
    return body


def _is_metric_point(report: Progress) -> bool:
    """A point of the run's training curve: a training report after an optimizer step (the
    first `training` report, at step 0, and `exporting` repeat what is known already)."""
    return report.phase == "training" and report.step > 0


def _metric_point(report: Progress, now: datetime) -> dict[str, Any]:
    """The measures of a training report (R17), at the trainer's time when it has one."""
    point: dict[str, Any] = {name: getattr(report, name) for name in METRIC_FIELDS}
    point["time"] = iso(_time(report.time, now)) if report.time else iso(now)
    kept: dict[str, Any] = finite(point)
    return kept


def _keyed(body: dict[str, Any]) -> dict[str, Any]:
    """`boot`, `seq` and `time` of a callback body; an older trainer's body without them gets a
    key of its own (applied, never matched by another channel)."""
    boot, seq = body.get("boot"), body.get("seq")
    if not boot or seq is None:
        boot, seq = f"callback-{uuid.uuid4().hex[:12]}", 0
    return {"boot": str(boot), "seq": int(seq), "time": str(body.get("time") or "")}
