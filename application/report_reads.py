"""The read side of trainer reports (R6, R8): what a run shows of them (its progress, by which
channel) and whether it stalled, read from the report store and the run's `started_by`.
Nothing here changes a run; `application.trainer_callbacks` decides and writes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from application.ports import NewerReport, ReportStore
from application.run_settings import RunSettings
from domain.run import POD_RUNNING, TRAINING, Run
from domain.times import parse_iso

PROGRESS, SEEN = "progress", "seen"  # the report store's state names


@dataclass(frozen=True)
class ReportReads:
    reports: ReportStore
    settings: RunSettings
    # The report that started a run's training, as its run keeps it (`Run.started_by`)
    started_by: Callable[[str], dict[str, Any] | None]

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
        """When the last report arrived (or the Pod started, if none ever did), once
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
        return _latest_seen(self.reports.get_state(run_id, SEEN), self.started_by(run_id))

    def last_report_at(self, run: Run) -> datetime | None:
        """When the trainer's last report arrived for `run`, by any channel (None: never), as
        `seen` says, from the run the caller holds (R5, R8: the boot deadline and the stall)."""
        seen = _latest_seen(self.reports.get_state(str(run.id), SEEN), run.started_by)
        return parse_iso(seen["at"]) if seen else None

    def shown_progress(self, run_id: str) -> dict[str, Any] | None:
        """The progress the run shows (`report_status`), read from the log's run."""
        return _shown_progress(self.reports.get_state(run_id, PROGRESS), self.started_by(run_id))


def _shown_progress(
    stored: dict[str, Any] | None, started: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The progress a run shows: the newer (`NewerReport`) of the report store's and that of
    the report which started training, kept by its event (`Run.started_by`, and `started_by`
    in the run's view document)."""
    if started is None or stored is None:
        return stored if started is None else started
    return stored if NewerReport(started)(stored) is None else started


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
