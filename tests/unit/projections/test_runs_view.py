"""The run-status view follows the run through its life and prices it at read time (B1, B2)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from domain.run import Run
from projections.reports.cleanup import cleanup_items
from projections.store.urls import open_view_store
from projections.views.runs import RUNS, RunsView, present_run
from tests.builders import small_trial

T0 = datetime(2026, 11, 1, tzinfo=UTC)
CONFIG = small_trial(max_runtime_minutes=120)


def project(store, run: Run) -> None:  # type: ignore[no-untyped-def]
    view = RunsView()
    with store.batch(RUNS) as b:
        for i, e in enumerate(run.collect_events(), start=b.position + 1):
            view.apply(b, e, i)
            b.set_position(i)


def test_b2_a_run_is_priced_per_second_running_and_stopped(tmp_path: Path) -> None:
    store = open_view_store(f"sqlite:///{tmp_path / 'v.db'}")
    run = Run.draft("org", CONFIG, "u", T0)
    run.confirm_launch(Decimal("0.60"), Decimal("0.60"), "EU-RO-1", "u", T0)
    run.record_pod_launched("pod1", "n", Decimal("0.60"), "EU-RO-1", "pod1-ab", 20, 730, "s", T0)
    run.record_export_failed("export_failed", "", "s", T0 + timedelta(hours=1))
    run.record_pod_stopped("export_failed", "s", T0 + timedelta(hours=1))
    project(store, run)
    doc = store.get(RUNS, "org", f"run:{run.id}")
    now = T0 + timedelta(hours=2)
    shown = present_run(doc, now)
    # 1 h of GPU at 0.60 + 1 h of running disk (20+730 GB at 0.10/GB-month)
    # + 1 h stopped (730 GB at 0.20)
    expected = Decimal("0.60") + Decimal(750) * Decimal("0.10") / 730 + Decimal("0.20")
    assert Decimal(shown["cost_so_far"]) == expected.quantize(Decimal("0.0001"))
    assert shown["runtime_seconds"] == 3600
    assert (shown["state"], shown["state_reason"]) == ("needs_recovery", "export_failed")
    items = cleanup_items([doc], now)
    assert [(i["kind"], i["pod_id"]) for i in items] == [("retained", "pod1")]
    assert Decimal(items[0]["storage_cost_per_hour"]) == Decimal("0.2")
