"""What the training container reports (R6–R8): one applier for every channel.

A report reaches the control plane by a callback (authenticated by a per-run token), through the
mailbox on the organization's storage, or as a `TENSORANT-REPORT` line of the Pod's logs (issue
13). Whichever channel brings a `(boot, seq)` first applies it; the others find it claimed (the
report that starts training is claimed by its `TrainingStarted`, every other one in the report
store: `_progress`). Log
lines are claimed and stored in one transaction, so a line is stored once; `exported`/`failed`
drive commands that are idempotent on the run, so a repeat changes nothing. The channel that
brought the latest progress is shown as `progress.via`; when anything last arrived is kept for
the stalled check.
"""

from __future__ import annotations

import functools
import hmac
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from eventsourcing.persistence import IntegrityError

from application.conflicts import retry_on_conflict
from application.log import Kept, TensorantLog
from application.ports import (
    Clock,
    LogMoved,
    MemoryReportStore,
    NewerReport,
    ReportLine,
    ReportStore,
    StateChange,
    finite,
)
from application.run_settings import RunSettings
from domain.errors import NotFound, TensorantError
from domain.run import LAUNCHING, POD_RUNNING, RUNNING, TERMINAL, TRAINING, Run
from domain.times import iso, parse_iso
from trainer.protocol import BOOT_PHASES, Exported, Failed, Log, Progress, Report

TRAINER = "trainer"  # the actor of every event a trainer's report causes
VIA_CALLBACK, VIA_MAILBOX, VIA_POD_LOGS = "callback", "mailbox", "pod_logs"
CHANNELS = (VIA_CALLBACK, VIA_MAILBOX, VIA_POD_LOGS)
PROGRESS, SEEN = "progress", "seen"  # the report store's state names

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
        working when its run ends (issue 14): nothing a Pod sends may change an ended run.
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
        return self.apply(run_id, [report], VIA_CALLBACK, loaded=run, loaded_at_claim=True)

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

    def report_status(self, doc: dict[str, Any], now: datetime) -> dict[str, Any]:
        """`progress` (with `via`) and `stalled_since` of a run document, at `now`."""
        return self.report_statuses([doc], now)[0]

    def progress_later(self, run_ids: list[str]) -> Callable[[], dict[str, dict[str, Any]]]:
        """The runs' progress states (for `report_statuses`), asked for now: a store may send
        the read with its next one (one round trip for both, PostgreSQL)."""
        return self.reports.get_states_later(run_ids, PROGRESS)

    def report_statuses(
        self,
        docs: list[dict[str, Any]],
        now: datetime,
        progress: dict[str, dict[str, Any]] | None = None,
    ) -> list[dict[str, Any]]:
        """`report_status` of many run documents, in their order, with one read of the report
        store per state name (a list of runs costs two queries, not two per run); `progress`:
        those runs' progress states when the caller has read them (`progress_later`)."""
        ids = [str(doc["id"]) for doc in docs]
        if progress is None:
            progress = self.reports.get_states(ids, PROGRESS)
        watched = [str(doc["id"]) for doc in docs if self.watched(doc)]
        seen = self.reports.get_states(watched, SEEN) if watched else {}
        return [
            {
                "progress": _shown_progress(progress.get(run_id), doc.get("started_by")),
                "stalled_since": self._stalled_since(doc, seen.get(run_id), now),
            }
            for run_id, doc in zip(ids, docs, strict=True)
        ]

    def report_status_later(
        self, run_id: str
    ) -> Callable[[dict[str, Any], datetime], dict[str, Any]]:
        """`report_status` of one run, its reads asked for now: a store may send them with
        its next read (the run's document: one round trip for the three, PostgreSQL). Given
        the run's document and the time, what this returns is `report_status`."""
        progress = self.reports.get_states_later([run_id], PROGRESS)
        seen = self.reports.get_states_later([run_id], SEEN)

        def status(doc: dict[str, Any], now: datetime) -> dict[str, Any]:
            return {
                "progress": _shown_progress(progress().get(run_id), doc.get("started_by")),
                "stalled_since": self._stalled_since(doc, seen().get(run_id), now),
            }

        return status

    def stalled_since(self, doc: dict[str, Any], now: datetime) -> str | None:
        """Issue 13: when the last report arrived (or the Pod started, if none ever did), once
        nothing has arrived on any channel for `stall_after_s` while the Pod runs."""
        if not self.watched(doc):
            return None
        return self._stalled_since(doc, self.reports.get_state(str(doc["id"]), SEEN), now)

    @staticmethod
    def watched(doc: dict[str, Any]) -> bool:
        """Only a training run whose Pod runs can stall."""
        return doc["state"] in TRAINING and doc["cleanup"]["pod_status"] == POD_RUNNING

    def _stalled_since(
        self, doc: dict[str, Any], seen: dict[str, Any] | None, now: datetime
    ) -> str | None:
        if not self.watched(doc):
            return None
        seen = _latest_seen(seen, doc.get("started_by"))
        last = seen["at"] if seen else doc.get("started_at")
        if not last:
            return None
        if (now - parse_iso(last)).total_seconds() < self.settings.stall_after_s:
            return None
        return str(last)

    def seen(self, run_id: str) -> dict[str, Any] | None:
        """When anything last arrived for the run, and by which channel (read from the log's
        run and the report store, as its view's document and the store show it)."""
        return _latest_seen(self.reports.get_state(run_id, SEEN), self._started_by(run_id))

    def last_report_at(self, run: Run) -> datetime | None:
        """When the trainer's last report arrived for `run`, by any channel (None: never), as
        `seen` says, from the run the caller holds (R5, R8: the boot deadline and the stall)."""
        seen = _latest_seen(self.reports.get_state(str(run.id), SEEN), run.started_by)
        return parse_iso(seen["at"]) if seen else None

    def shown_progress(self, run_id: str) -> dict[str, Any] | None:
        """The progress the run shows (`report_status`), read from the log's run."""
        return _shown_progress(self.reports.get_state(run_id, PROGRESS), self._started_by(run_id))

    def _started_by(self, run_id: str) -> dict[str, Any] | None:
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
            run.record_adapter_exported(
                report.object_key, report.sha256, report.size_bytes, TRAINER, at
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


def _shown_progress(
    stored: dict[str, Any] | None, started: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The progress a run shows: the newer (`NewerReport`) of the report store's and that of
    the report which started training, kept by its event (`Run.started_by`, and `started_by`
    in the run's view document)."""
    if started is None or stored is None:
        return stored if started is None else started
    return stored if NewerReport(started)(stored) is None else started


def _claim_state(seen: dict[str, Any], progress: dict[str, Any]) -> dict[str, StateChange]:
    """What a progress report's fresh claim changes in the report store, in its transaction:
    when the run was last seen, and the progress shown unless a newer report's is."""
    return {SEEN: seen, PROGRESS: NewerReport(progress)}


def _latest_seen(
    seen: dict[str, Any] | None, started: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The later of the report store's `seen` and the arrival of the report that started
    training (`Run.started_by`, which the store never saw)."""
    if started is None:
        return seen
    if seen is not None and parse_iso(seen["at"]) >= parse_iso(started["received_at"]):
        return seen
    return {"at": started["received_at"], "via": started["via"]}


def _progress_body(report: Progress, via: str, now: datetime) -> dict[str, Any]:
    """The progress to show (`NewerReport`: unless a newer report's is shown already, a late
    copy of an older report does not replace a newer one)."""
    body = report.to_json()
    body.pop("type", None)
    body.update(via=via, received_at=iso(now))
    return body


def _keyed(body: dict[str, Any]) -> dict[str, Any]:
    """`boot`, `seq` and `time` of a callback body; an older trainer's body without them gets a
    key of its own (applied, never matched by another channel)."""
    boot, seq = body.get("boot"), body.get("seq")
    if not boot or seq is None:
        boot, seq = f"callback-{uuid.uuid4().hex[:12]}", 0
    return {"boot": str(boot), "seq": int(seq), "time": str(body.get("time") or "")}
