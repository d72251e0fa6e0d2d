"""B3: the column-wise charges (`charge_columns`) equal the row-by-row ones (`charge_rows`), and
the FOCUS export built from them is byte for byte the FOCUS file of `focus_record` on each row.

A generated billing view (SQLite) holds Pods that run, stop and resume at odd minutes, at prices
written differently (1.64 and 1.640), some still running at `now`, one with overlapping segments;
network volumes resized across the 1,000 GB tier; and RunPod bills: whole stretches billed the
same amount, amounts changing hour to hour, zero amounts, hours billed where we have no rows,
resources we do not know, hours outside the period. A storage rate change takes effect in the
middle of an hour within the period. Two more cases hold bills that the Arrow reading leaves to
the row-by-row one: an amount written as a JSON number, and two bills of one hour.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from domain.rates import RATES, StorageRates, rates_at
from domain.times import iso
from projections.reports import charges
from projections.reports.charges import ChargeRow, charge_columns, charge_rows
from projections.reports.costs import account_of, export
from projections.reports.focus import (
    FOCUS_SCHEMA,
    focus_record,
    write_focus_csv,
    write_focus_parquet,
)
from projections.store.sqlite import SQLiteViewStore
from projections.views.billing import BILLING, bill_key, with_charge

ORG = "org_a"
LO = datetime(2026, 11, 1, tzinfo=UTC)
HI = datetime(2026, 11, 9, tzinfo=UTC)
NOW = datetime(2026, 11, 8, 17, 42, 10, tzinfo=UTC)
RATE_CHANGE = datetime(2026, 11, 4, 6, 20, tzinfo=UTC)


def _at(rnd: random.Random, lo: datetime, hours: int) -> datetime:
    return lo + timedelta(seconds=rnd.randrange(hours * 3600))


def _pod(rnd: random.Random, i: int) -> dict[str, Any]:
    t = _at(rnd, LO - timedelta(hours=20), 60)
    segments: list[dict[str, Any]] = []
    for s in range(rnd.randrange(1, 6)):
        end = t + timedelta(seconds=rnd.choice([600, 2400, 3600 * rnd.randrange(1, 60) + 77]))
        running = s % 2 == 0
        price = rnd.choice(["1.64", "1.640", "0.79", "2.1"]) if running else "0"
        segments.append(
            {
                "state": "running" if running else "stopped",
                "start": iso(t),
                "end": iso(end),
                "cost_per_hour": price,
            }
        )
        t = end
    if i % 3 == 0:
        segments[-1]["end"] = None  # still running (or stopped) at `now`
    if i == 5:  # overlapping segments: the row-by-row merge adds them up hour by hour
        segments.append({**segments[0], "end": segments[-1]["start"]})
    return {
        "pod_id": f"pod{i}",
        "pod_name": f"tensorant-run-{i}",
        "run_id": f"run{i}" if i % 4 else None,
        "project_id": "p1" if i % 4 else None,
        "gpu_type_id": "NVIDIA A100 80GB PCIe",
        "gpu_count": rnd.choice([None, 1, 2]),
        "datacenter_id": rnd.choice([None, "EU-RO-1"]),
        "container_gb": rnd.choice([0, 20]),
        "volume_gb": rnd.choice([0, 50]),
        "segments": segments,
    }


def _volume(rnd: random.Random, i: int) -> dict[str, Any]:
    t = _at(rnd, LO - timedelta(hours=5), 50)
    segments = []
    for _ in range(rnd.randrange(1, 4)):
        end = t + timedelta(seconds=3600 * rnd.randrange(1, 70) + rnd.randrange(3600))
        segments.append({"start": iso(t), "end": iso(end), "size_gb": rnd.choice([100, 1500])})
        t = end
    segments[-1]["end"] = None if i % 2 else segments[-1]["end"]
    return {"volume_id": f"vol{i}", "datacenter_id": "EU-RO-1", "segments": segments}


def _bills(rnd: random.Random, pods: int, volumes: int) -> list[dict[str, Any]]:
    out = []
    resources = [("pod", f"pod{i}") for i in range(pods + 2)]  # two Pods we do not know
    resources += [("network_volume", f"vol{i}") for i in range(volumes)]
    for kind, rid in resources:
        hour = LO - timedelta(hours=3)
        while hour < HI + timedelta(hours=3):
            stretch = rnd.randrange(1, 40)
            amount = rnd.choice([None, None, "1.70", "1.7", "0", "0.00", "0.0123", "2.5"])
            for k in range(stretch):
                if amount is not None and rnd.random() < 0.9:
                    start = hour + timedelta(hours=k)
                    amt = amount if rnd.random() < 0.8 else rnd.choice(["0.5", "1.70"])
                    out.append({"kind": kind, "resource_id": rid, "start": start, "amount": amt})
            hour += timedelta(hours=stretch)
    return out


def _store(tmp_path: Path, seed: int, quirk: str | None = None) -> SQLiteViewStore:
    rnd = random.Random(seed)
    store = SQLiteViewStore(str(tmp_path / "views.db"))
    pods, volumes = 12, 5
    with store.batch(BILLING) as batch:
        for i in range(pods):
            batch.put(ORG, f"pod:pod{i}", _pod(rnd, i))
        for i in range(volumes):
            batch.put(ORG, f"volume:vol{i}", _volume(rnd, i))
        charges_ = [
            {**b, "start": iso(b["start"]), "end": iso(b["start"] + timedelta(hours=1))}
            for b in _bills(rnd, pods, volumes)
        ]
        hour = "2026-11-02T10:00:00"
        if quirk == "number":  # an amount written as a JSON number
            charges_.append(
                {"kind": "pod", "resource_id": "pod1", "start": f"{hour}Z", "amount": 1.7}
            )
        if quirk == "same hour twice":  # two bills of one hour: the later start text wins
            for zone, amount in (("Z", "0.25"), ("+00:00", "9.5")):
                charges_.append(
                    {"kind": "pod", "resource_id": "pod2", "start": hour + zone, "amount": amount}
                )
        for c in charges_:  # as the view records them
            key = bill_key(c["kind"], c["resource_id"], c["start"])
            batch.put(ORG, key, with_charge(batch.get(ORG, key), c, iso(NOW)))
        if quirk == "one-hour document":  # the shape before stretches, in a view not rebuilt
            bill = {"kind": "pod", "resource_id": "pod3", "start": f"{hour}Z", "amount": "4.25"}
            batch.put(ORG, f"bill:pod:pod3:{hour}Z", {**bill, "end": "2026-11-02T11:00:00Z"})
        batch.set_position(1)
    return store


@pytest.fixture(autouse=True)
def rate_change(monkeypatch: pytest.MonkeyPatch) -> None:
    table = (
        *RATES,
        StorageRates(effective_from=RATE_CHANGE, container_disk_running=Decimal("0.12")),
    )
    monkeypatch.setattr(charges, "RATES", table)
    monkeypatch.setattr(charges, "rates_at", lambda at: rates_at(at, table))


def _exact(rows: list[ChargeRow]) -> list[tuple[Any, ...]]:
    """Rows with their money as written (equal Decimals may print differently)."""
    return [(r, *(str(getattr(r, f)) for f in charges.MONEY_FIELDS)) for r in rows]


@pytest.fixture
def row_by_row(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many resources went through the row-by-row bill path (`_billed`), not Arrow's."""
    calls: list[int] = []
    billed = charges._billed

    def counted(*args: Any) -> Any:
        calls.append(1)
        return billed(*args)

    monkeypatch.setattr(charges, "_billed", counted)
    return calls


@pytest.mark.parametrize(
    ("seed", "quirk"),
    [
        (1, None),
        (2, None),
        (3, None),
        (1, "number"),
        (2, "same hour twice"),
        (3, "one-hour document"),
    ],
)
def test_b3_charge_columns_equal_charge_rows_row_for_row(
    tmp_path: Path, seed: int, quirk: str | None, row_by_row: list[int]
) -> None:
    store = _store(tmp_path, seed, quirk)
    rows = charge_rows(store, BILLING, ORG, LO, HI, NOW)
    columns = charge_columns(store, BILLING, ORG, LO, HI, NOW)
    kinds = {r.charge for r in rows}
    assert len(rows) > 1000 and {charges.PROVIDER_ONLY, charges.GPU} <= kinds
    assert any(not r.estimated for r in rows) and any(r.estimated for r in rows)
    assert _exact(columns.rows()) == _exact(rows)
    assert bool(row_by_row) == (quirk is not None)  # the quirks are left to the row-by-row path


@pytest.mark.parametrize(
    ("lo", "hi"),
    [
        (datetime(2026, 11, 2, 5, 30, tzinfo=UTC), datetime(2026, 11, 6, 13, 0, tzinfo=UTC)),
        (datetime(2026, 11, 3, 7, tzinfo=UTC), datetime(2026, 11, 3, 9, 59, 59, tzinfo=UTC)),
        (datetime(2026, 10, 20, tzinfo=UTC), datetime(2026, 11, 20, tzinfo=UTC)),
    ],
)
def test_b3_charge_columns_of_a_period_that_cuts_bill_stretches(
    tmp_path: Path, lo: datetime, hi: datetime, row_by_row: list[int]
) -> None:
    """Periods starting and ending inside a day's stretches, and one wider than the bills."""
    store = _store(tmp_path, 5)
    rows = charge_rows(store, BILLING, ORG, lo, hi, NOW)
    assert any(not r.estimated for r in rows)
    assert _exact(charge_columns(store, BILLING, ORG, lo, hi, NOW).rows()) == _exact(rows)
    assert not row_by_row


def test_b3_charge_columns_of_no_usage_are_empty(tmp_path: Path) -> None:
    store = SQLiteViewStore(str(tmp_path / "views.db"))
    columns = charge_columns(store, BILLING, ORG, LO, HI, NOW)
    assert len(columns) == 0 and columns.rows() == []


@pytest.mark.parametrize("fmt", ["focus-csv", "focus-parquet"])
def test_b3_focus_export_is_byte_for_byte_focus_record_of_charge_rows(
    tmp_path: Path, fmt: str
) -> None:
    store = _store(tmp_path, 4)
    body, _, _ = export(store, ORG, LO, HI, NOW, fmt)
    account = account_of(store, ORG)
    rows = charge_rows(store, BILLING, ORG, LO, HI, NOW)
    table = pa.Table.from_pylist([focus_record(r, account) for r in rows], schema=FOCUS_SCHEMA)
    expected = pa.BufferOutputStream()
    (write_focus_csv if fmt == "focus-csv" else write_focus_parquet)(table, expected)
    assert table.num_rows > 1000
    assert body == expected.getvalue().to_pybytes()


def test_v3_serving_endpoint_hours_are_in_the_focus_export_and_the_costs(tmp_path: Path) -> None:
    """RunPod's recorded hours of a serving endpoint: their own ServiceName and ResourceType,
    the bill as both list and billed cost, beside the Pods' rows; the costs add them up."""
    from projections.reports.costs import costs, rows_for

    store = _store(tmp_path, 5)
    hours = [(datetime(2026, 11, 3, h, tzinfo=UTC), a) for h, a in ((4, "0.0123"), (5, "0.5"))]
    with store.batch(BILLING) as batch:
        for start, amount in hours:
            c = {"kind": "serverless", "resource_id": "ep1", "start": iso(start)}
            c |= {"end": iso(start + timedelta(hours=1)), "amount": amount}
            key = bill_key("serverless", "ep1", c["start"])
            batch.put(ORG, key, with_charge(batch.get(ORG, key), c, iso(NOW)))
        batch.set_position(2)
    body, _, _ = export(store, ORG, LO, HI, NOW, "focus-csv")
    import csv
    import io

    rows = list(csv.DictReader(io.StringIO(body.decode())))
    serving = [r for r in rows if r["ResourceId"] == "ep1"]
    assert [(r["ServiceName"], r["ResourceType"], r["ServiceCategory"]) for r in serving] == [
        ("RunPod Serverless", "Serverless Endpoint", "AI and Machine Learning")
    ] * 2
    assert sorted(Decimal(r["BilledCost"]) for r in serving) == [Decimal("0.0123"), Decimal("0.5")]
    assert all(r["ConsumedQuantity"] == "" and r["ListCost"] == r["BilledCost"] for r in serving)
    assert len(rows) == len(charge_rows(store, BILLING, ORG, LO, HI, NOW)) + 2
    reported = rows_for(store, ORG, LO, HI, NOW)
    by_resource = costs(store, ORG, LO, HI, NOW, "resource")
    assert Decimal(by_resource["total"]) == sum(
        (r.billed_cost for r in reported), Decimal(0)
    ).quantize(Decimal("0.01"))
    assert any(line.get("resource_id") == "ep1" for line in by_resource["lines"])
