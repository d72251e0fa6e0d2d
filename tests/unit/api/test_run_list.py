"""The runs list keeps what cannot change (api.run_list) and nothing else: a changed
run document, a new progress and a live Pod's clock all show on the next read, and the JSON is
the bytes `response_model=list[RunPublic]` gives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from api.run_list import presented_runs, run_docs_where, runs_json
from api.schemas.runs import RunPublic
from application.memory import MemoryReportStore
from application.report_reads import PROGRESS, ReportReads
from application.run_settings import RunSettings
from domain.run import Run
from projections.reports.cleanup import CLEANUP_KIND
from projections.store.sqlite import SQLiteViewStore
from projections.store.urls import open_view_store
from projections.views.runs import RUNS, RunsView
from tests.builders import small_trial

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def with_pod(org: str, pod: str) -> Run:
    """A run of `org` whose Pod `pod` was launched at T0 (it bills)."""
    run = Run.draft(org, small_trial(), "u", T0)
    run.confirm_launch(Decimal("0.60"), Decimal("0.60"), "EU-RO-1", "u", T0)
    run.record_pod_launched(pod, "n", Decimal("0.60"), "EU-RO-1", "h", 20, 730, "s", T0)
    return run


def project(store: Any, run: Run) -> None:
    view = RunsView()
    with store.batch(RUNS) as b:
        for i, e in enumerate(run.collect_events(), start=b.position + 1):
            view.apply(b, e, i)
            b.set_position(i)


def test_only_what_cannot_change_is_kept(tmp_path: Path) -> None:
    store = open_view_store(f"sqlite:///{tmp_path / 'v.db'}")
    reports = MemoryReportStore()
    reads = ReportReads(reports, RunSettings(), lambda _run_id: None)
    draft = Run.draft("org", small_trial(), "u", T0)
    live = with_pod("org", "pod1")
    project(store, draft)
    project(store, live)
    other = Run.draft("org2", small_trial(), "u", T0)
    project(store, other)

    def shown(at: datetime) -> dict[str, tuple[RunPublic, bytes]]:
        return {run.id: (run, body) for run, body in presented_runs(store, "org", at, reads)}

    first = shown(T0 + timedelta(hours=1))
    assert set(first) == {str(draft.id), str(live.id)}  # never another organization's run
    later = shown(T0 + timedelta(hours=2))
    assert later[str(draft.id)][0] is first[str(draft.id)][0]  # kept: nothing can change it
    assert first[str(live.id)][0].runtime_seconds == 3600  # the live Pod's clock runs on
    assert later[str(live.id)][0].runtime_seconds == 7200
    assert Decimal(later[str(live.id)][0].cost_so_far) > Decimal(first[str(live.id)][0].cost_so_far)

    reports.put_state(str(draft.id), PROGRESS, {"step": 1, "via": "callback"})
    with_progress = shown(T0 + timedelta(hours=2))[str(draft.id)][0]
    assert with_progress.progress == {"step": 1, "via": "callback"}

    draft.update_draft(small_trial(max_runtime_minutes=33), "u", T0)
    project(store, draft)
    edited = shown(T0 + timedelta(hours=2))[str(draft.id)][0]
    assert edited.max_runtime_minutes == 33
    assert edited.progress == {"step": 1, "via": "callback"}

    models = [run for run, _ in presented_runs(store, "org", T0, reads)]
    expected = TypeAdapter(list[RunPublic]).dump_json(models, by_alias=True)
    assert runs_json(presented_runs(store, "org", T0, reads)) == expected
    assert runs_json([]) == b"[]"


class _RemoteLike(SQLiteViewStore):
    """SQLite answering as a remote store would be used: the store filters."""

    local_reads = False


def test_runs_with_a_pod_are_the_same_whether_the_store_or_the_api_filters(
    tmp_path: Path,
) -> None:
    local = open_view_store(f"sqlite:///{tmp_path / 'v.db'}")
    remote = _RemoteLike(str(tmp_path / "v.db"))
    draft = Run.draft("org", small_trial(), "u", T0)
    live = with_pod("org", "pod1")
    other = with_pod("org2", "pod2")
    for run in (draft, live, other):
        project(local, run)
    path, kinds = ("cleanup", "pod_status"), tuple(CLEANUP_KIND)
    for store in (local, remote):
        found = [e.doc["id"] for e in run_docs_where(store, "org", path, kinds)]
        assert found == [str(live.id)]  # not the draft, never another organization's run
    assert [e.doc["id"] for e in run_docs_where(remote, "org", path, ("none",))] == [str(draft.id)]
    local.close()
    remote.close()


class _CountingReports(MemoryReportStore):
    """The report store, noting which reads were asked for ahead and which were made after."""

    def __init__(self) -> None:
        super().__init__()
        self.ahead: list[list[str]] = []
        self.after: list[list[str]] = []

    def get_states_later(self, run_ids: list[str], name: str) -> Any:
        self.ahead.append(list(run_ids))
        found = MemoryReportStore.get_states(self, run_ids, name)
        return lambda: found

    def get_states(self, run_ids: list[str], name: str) -> dict[str, dict[str, Any]]:
        self.after.append(list(run_ids))
        return super().get_states(run_ids, name)


def test_the_progress_of_the_runs_listed_last_time_is_asked_for_ahead(tmp_path: Path) -> None:
    store = open_view_store(f"sqlite:///{tmp_path / 'v.db'}")
    reports = _CountingReports()
    reads = ReportReads(reports, RunSettings(), lambda _run_id: None)
    org = f"org-{tmp_path.name}"
    first = Run.draft(org, small_trial(), "u", T0)
    project(store, first)

    def progress() -> dict[str, Any]:
        return {run.id: run.progress for run, _ in presented_runs(store, org, T0, reads)}

    assert progress() == {str(first.id): None}
    assert reports.ahead == [] and reports.after == [[str(first.id)]]  # nothing known yet
    reports.put_state(str(first.id), PROGRESS, {"step": 2, "via": "callback"})
    assert progress()[str(first.id)]["step"] == 2  # asked ahead, and as fresh as after
    assert reports.ahead == [[str(first.id)]] and len(reports.after) == 1
    second = Run.draft(org, small_trial(), "u", T0)
    project(store, second)
    reports.put_state(str(second.id), PROGRESS, {"step": 5, "via": "storage"})
    shown = progress()  # the list changed: the guess is dropped, the read made after
    assert shown[str(second.id)]["step"] == 5 and shown[str(first.id)]["step"] == 2
    assert sorted(reports.after[-1]) == sorted([str(first.id), str(second.id)])
    store.close()


def test_an_unchanged_list_of_runs_that_cannot_change_is_answered_as_kept(
    tmp_path: Path,
) -> None:
    store = open_view_store(f"sqlite:///{tmp_path / 'v.db'}")
    reports = MemoryReportStore()
    reads = ReportReads(reports, RunSettings(), lambda _run_id: None)
    org = f"org-{tmp_path.name}"
    drafts = [Run.draft(org, small_trial(), "u", T0) for _ in range(3)]
    for run in drafts:
        project(store, run)

    first = presented_runs(store, org, T0, reads)
    first.reverse()  # the caller's list: the console sorts its copy
    later = presented_runs(store, org, T0 + timedelta(days=3), reads)
    assert [run.id for run, _ in later] == sorted(str(run.id) for run in drafts)
    assert {id(item) for item in later} == {id(item) for item in first}  # kept, whole
    later.reverse()
    again = presented_runs(store, org, T0, reads)
    assert [run.id for run, _ in again] == sorted(str(run.id) for run in drafts)

    reports.put_state(str(drafts[0].id), PROGRESS, {"step": 4, "via": "callback"})
    progressed = {run.id: run for run, _ in presented_runs(store, org, T0, reads)}
    assert progressed[str(drafts[0].id)].progress == {"step": 4, "via": "callback"}
    assert progressed[str(drafts[1].id)].progress is None

    drafts[1].update_draft(small_trial(max_runtime_minutes=44), "u", T0)
    project(store, drafts[1])
    edited = {run.id: run for run, _ in presented_runs(store, org, T0, reads)}
    assert edited[str(drafts[1].id)].max_runtime_minutes == 44
    assert edited[str(drafts[0].id)].progress == {"step": 4, "via": "callback"}

    live = with_pod(org, f"pod-{tmp_path.name}")
    project(store, live)
    at_one = {r.id: r for r, _ in presented_runs(store, org, T0 + timedelta(hours=1), reads)}
    at_two = {r.id: r for r, _ in presented_runs(store, org, T0 + timedelta(hours=2), reads)}
    assert at_one[str(live.id)].runtime_seconds == 3600  # a live Pod: the list is not kept
    assert at_two[str(live.id)].runtime_seconds == 7200
    store.close()


def test_the_report_that_started_training_shows_until_a_newer_one(tmp_path: Path) -> None:
    """The first report of a run is kept by its `TrainingStarted` (the report store
    never sees it); the list shows its progress, and when it arrived counts as the run last
    seen, until the store holds a newer report."""
    store = open_view_store(f"sqlite:///{tmp_path / 'v.db'}")
    reports = MemoryReportStore()
    settings = RunSettings()
    reads = ReportReads(reports, settings, lambda _run_id: None)
    run = with_pod("org", "pod1")
    at = T0 + timedelta(minutes=1)
    first = {"boot": "b1", "seq": 2, "time": "t2", "step": 1, "via": "callback"}
    first["received_at"] = at.isoformat()
    run.start_training("trainer", at, report=first)
    project(store, run)
    run_id = str(run.id)

    def shown(now: datetime) -> RunPublic:
        return {r.id: r for r, _ in presented_runs(store, "org", now, reads)}[run_id]

    assert shown(at).progress == first
    assert shown(at).stalled_since is None
    quiet = at + timedelta(seconds=settings.stall_after_s + 1)
    assert shown(quiet).stalled_since == first["received_at"]  # not the Pod's start
    reports.put_state(run_id, PROGRESS, {**first, "seq": 1, "step": 0, "via": "mailbox"})
    assert shown(at).progress == first  # an older report's copy does not replace it
    newer = {**first, "seq": 3, "step": 2, "via": "mailbox"}
    reports.put_state(run_id, PROGRESS, newer)
    assert shown(at).progress == newer
    later = (at + timedelta(seconds=5)).isoformat()
    reports.put_state(run_id, "seen", {"at": later, "via": "mailbox"})
    assert shown(quiet + timedelta(seconds=5)).stalled_since == later
    assert "started_by" not in shown(at).model_dump()
