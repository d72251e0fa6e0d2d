"""B4: after a month against the sandbox, our costs equal RunPod's own ledger to the cent."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pyarrow.parquet as pq
import pytest

from domain.rates import cents
from projections.reports.charges import ChargeRow, charge_rows
from projections.reports.costs import export
from projections.reports.reconciliation import reconciliation_report
from projections.views.billing import BILLING
from runpod_sandbox.billing_api import ledger_report
from tests.integration.billing.conftest import T0, SandboxWorld


def _per_resource(rows: list[ChargeRow], attr: str) -> dict[tuple[str, str], Decimal]:
    out: dict[tuple[str, str], Decimal] = {}
    for r in rows:
        k = (r.resource_kind, r.resource_id)
        out[k] = out.get(k, Decimal(0)) + getattr(r, attr)
    return out


def _ledger(world: SandboxWorld) -> dict[tuple[str, str], Decimal]:
    now = world.sandbox.clock.now()
    report = ledger_report(world.sandbox.model, T0, now)
    out = {("pod", p["pod_id"]): Decimal(p["total"]["exact"]) for p in report["pods"]}
    out |= {
        ("network_volume", v["network_volume_id"]): Decimal(v["total"]["exact"])
        for v in report["network_volumes"]
    }
    return out


def test_b4_estimate_alone_is_within_a_cent_per_pod_hour_of_runpods_ledger(
    sandbox_month: SandboxWorld,
) -> None:
    w = sandbox_month
    now = w.container.clock.now()
    ledger = _ledger(w)
    pods_seen = 0
    for h in w.orgs:
        rows = charge_rows(w.container.views, BILLING, h.org_id, T0, now, now)
        for (kind, rid), estimate in _per_resource(rows, "list_cost").items():
            if kind != "pod":
                continue
            pods_seen += 1
            hours = len({r.start for r in rows if r.resource_id == rid})
            assert abs(estimate - ledger[(kind, rid)]) <= Decimal("0.01") * hours, rid
    assert pods_seen == 4


def test_b4_after_reconciliation_costs_equal_the_ledger_to_the_cent_per_pod_and_volume(
    sandbox_month: SandboxWorld,
) -> None:
    w = sandbox_month
    billing, views = w.container.services.billing, w.container.views
    now = w.container.clock.now()
    for h in w.orgs:
        first = billing.reconcile(h.org_id, T0, now, settle_lag=timedelta(0))
        again = billing.reconcile(h.org_id, T0, now, settle_lag=timedelta(0))
        assert first.charges_recorded > 0 and again.charges_recorded == 0  # idempotent
    w.container.catch_up()
    ledger = _ledger(w)
    checked = set()
    for h in w.orgs:
        rows = charge_rows(views, BILLING, h.org_id, T0, now, now)
        assert rows and not any(r.estimated for r in rows)
        for key, cost in _per_resource(rows, "billed_cost").items():
            assert cents(cost) == cents(ledger[key]), key
            checked.add(key)
        report = reconciliation_report(views, BILLING, h.org_id, T0, now, now)
        for line in report["resources"]:
            key = (line["resource_kind"], line["resource_id"])
            assert Decimal(line["cost"]) == cents(ledger[key])
    pods = {k for k in checked if k[0] == "pod"}
    volumes = {k for k in checked if k[0] == "network_volume"}
    assert len(pods) == 4 and len(volumes) == 1
    # Only our organizations' resources: every ledger Pod is one of ours here.
    assert pods == {k for k in ledger if k[0] == "pod"}


def test_b4_the_report_lists_the_hours_where_estimate_and_bill_differ(
    sandbox_month: SandboxWorld,
) -> None:
    """Acme's volume grew to 150 GB, but RunPod kept billing 100 GB: each later hour is listed."""
    w = sandbox_month
    now = w.container.clock.now()
    acme = w.orgs[0].org_id
    w.container.services.billing.reconcile(acme, T0, now, settle_lag=timedelta(0))
    w.container.catch_up()
    report = reconciliation_report(w.container.views, BILLING, acme, T0, now, now)
    diffs = [d for d in report["differences"] if d["resource_kind"] == "network_volume"]
    assert diffs and all(Decimal(d["billed"]) < Decimal(d["estimate"]) for d in diffs)


def _focus_per_resource(body: bytes, fmt: str, column: str) -> dict[tuple[str, str], Decimal]:
    """A FOCUS export's `column` summed per (resource kind, ResourceId), read as a user would."""
    if fmt == "focus-csv":
        records = list(csv.DictReader(io.StringIO(body.decode())))
    else:
        records = pq.read_table(io.BytesIO(body)).to_pylist()
    out: dict[tuple[str, str], Decimal] = {}
    for r in records:
        kind = "pod" if r["ResourceType"] == "GPU Pod" else "network_volume"
        key = (kind, str(r["ResourceId"]))
        out[key] = out.get(key, Decimal(0)) + Decimal(str(r[column]))
    return out


@pytest.mark.parametrize("fmt", ["focus-csv", "focus-parquet"])
def test_b3_b4_after_reconciliation_focus_billedcost_per_resource_is_the_ledger_to_the_cent(
    sandbox_month: SandboxWorld, fmt: str
) -> None:
    """BilledCost is RunPod's amount, not our estimate: Acme's volume is estimated at the size
    it grew to while RunPod kept billing the old size, so the two differ by dollars."""
    w = sandbox_month
    views, now = w.container.views, w.container.clock.now()
    for h in w.orgs:
        w.container.services.billing.reconcile(h.org_id, T0, now, settle_lag=timedelta(0))
    w.container.catch_up()
    ledger = _ledger(w)
    differs = 0
    for h in w.orgs:
        body, _, _ = export(views, h.org_id, T0, now, now, fmt)
        billed = _focus_per_resource(body, fmt, "BilledCost")
        listed = _focus_per_resource(body, fmt, "ListCost")
        assert billed and set(billed) <= set(ledger)
        for key, cost in billed.items():
            assert cents(cost) == cents(ledger[key]), (key, cost, ledger[key])
            differs += abs(listed[key] - ledger[key]) > Decimal("0.01")
    assert differs >= 1  # the estimate really is different from the ledger somewhere
