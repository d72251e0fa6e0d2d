"""The console's runs page renders each run's row once per distinct run
(api.console.run_rows); the HTML is what the page's own loop over the runs rendered, and a
changed run shows its new row."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

from markupsafe import Markup

from api.console.run_rows import run_rows
from api.console.web import TEMPLATES
from api.run_list import presented_runs
from api.schemas.runs import RunPublic
from application.memory import MemoryReportStore
from application.report_reads import ReportReads
from application.run_settings import RunSettings
from domain.run import Run
from projections.store.urls import open_view_store
from tests.builders import small_trial
from tests.unit.api.test_run_list import project, with_pod

T0 = datetime(2026, 11, 1, tzinfo=UTC)
# The loop the runs page had before its rows were kept (runs.html at 897f2b6), with its times
# as the rows now show them.
LOOP = (
    """{% for r in runs %}
<tr data-run="{{ r.id }}">
  <td><a href="/runs/{{ r.id }}">{{ r.id[:8] }}</a></td>
  <td>{{ 'Training trial' if r.kind == 'trial' else 'Full run' }}</td>
  <td><span class="state state-{{ r.state }}">{{ r.state }}</span>"""
    """{% if r.state_reason %} ({{ r.state_reason }}){% endif %}</td>
  <td>{{ r.gpu_count }} × {{ r.gpu_type_id }}</td>
  <td>{% if r.price_per_hour %}${{ r.price_per_hour }}/hour{% else %}—{% endif %}</td>
  <td>${{ r.cost_so_far }}</td>
  <td>{{ r.created_at|when }}</td>
</tr>
{% endfor %}"""
)


def test_rows_are_the_html_the_page_loop_rendered_and_follow_changes(tmp_path: Path) -> None:
    store = open_view_store(f"sqlite:///{tmp_path / 'v.db'}")
    reads = ReportReads(MemoryReportStore(), RunSettings(), lambda _run_id: None)
    draft = Run.draft("org", small_trial(), "u", T0)
    live = with_pod("org", "pod1")
    project(store, draft)
    project(store, live)
    shown = presented_runs(store, "org", T0, reads)
    loop = TEMPLATES.env.from_string(LOOP)

    def page_loop(runs: list[RunPublic]) -> str:
        return loop.render(runs=runs)

    rows = run_rows(shown)
    assert isinstance(rows, Markup)  # written as it is, not escaped again by the page
    assert rows == page_loop([run for run, _ in shown])
    odd = shown[0][0].model_copy(update={"gpu_type_id": '<b>"A&B"</b>', "state_reason": "<x>"})
    escaped = run_rows([(odd, b"a distinct text")])
    assert escaped == page_loop([odd])
    assert "&lt;b&gt;&#34;A&amp;B&#34;&lt;/b&gt;" in escaped
    changed = odd.model_copy(update={"state": "cancelled"})
    assert run_rows([(changed, b"another text")]) == page_loop([changed])
    store.close()


def test_an_unchanged_list_is_joined_once_and_a_changed_one_anew(tmp_path: Path) -> None:
    store = open_view_store(f"sqlite:///{tmp_path / 'v.db'}")
    reads = ReportReads(MemoryReportStore(), RunSettings(), lambda _run_id: None)
    org = f"org-{tmp_path.name}"
    drafts = [Run.draft(org, small_trial(), "u", T0 + timedelta(minutes=i)) for i in range(5)]
    for run in drafts:
        project(store, run)
    second = drafts[1]
    loop = TEMPLATES.env.from_string(LOOP)

    rows = run_rows(presented_runs(store, org, T0, reads))
    assert run_rows(presented_runs(store, org, T0, reads)) is rows
    flipped = presented_runs(store, org, T0, reads)[::-1]
    assert run_rows(flipped) == loop.render(runs=[run for run, _ in flipped]) != rows

    newest = run_rows(presented_runs(store, org, T0, reads), newest_first=True)
    by_creation = sorted(
        presented_runs(store, org, T0, reads), key=lambda s: s[0].created_at, reverse=True
    )
    assert newest == loop.render(runs=[run for run, _ in by_creation])
    times = [newest.index(f'data-run="{run.id}"') for run, _ in by_creation]
    assert times == sorted(times) and by_creation[0][0].id == str(drafts[-1].id)
    assert run_rows(presented_runs(store, org, T0, reads), newest_first=True) is newest

    second.update_draft(small_trial(gpu_type_id="NVIDIA H100 80GB HBM3"), "u", T0)
    project(store, second)
    shown = presented_runs(store, org, T0, reads)
    changed = run_rows(shown)
    assert changed == loop.render(runs=[run for run, _ in shown])
    assert "H100" in changed and "H100" not in rows
    store.close()
