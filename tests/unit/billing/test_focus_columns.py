"""B3: the column-wise FOCUS table equals the row-by-row definition (`focus_record`), byte for byte.

The export builds its columns with Arrow compute (grouping, de-duplication, timestamps from
`datetime.timestamp`); `focus_record` is the readable one-row-at-a-time definition. A generated
month of mixed rows (GPU, disks, network volumes, provider-only hours, estimated and billed, equal
prices written differently, several months and runs) must give the same table and the same CSV
and Parquet bytes either way.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pyarrow as pa
import pytest

from projections.reports import focus
from projections.reports.charges import (
    CONTAINER_DISK,
    GPU,
    NETWORK_VOLUME,
    NETWORK_VOLUME_OVER_1TB,
    PROVIDER_ONLY,
    VOLUME_DISK_RUNNING,
    VOLUME_DISK_STOPPED,
    ChargeColumns,
    ChargeRow,
)
from projections.reports.focus import (
    FOCUS_SCHEMA,
    focus_record,
    focus_table,
    write_focus_csv,
    write_focus_parquet,
)

ACCOUNT = {
    "billing_account_id": "user_1",
    "billing_account_name": "RunPod account user_1",
    "org_name": 'Acme, "Labs"',
}


def _rows(n: int, seed: int = 7) -> list[ChargeRow]:
    rnd = random.Random(seed)
    t0 = datetime(2026, 10, 30, 20, tzinfo=UTC)
    prices = [Decimal("1.64"), Decimal("1.640"), Decimal("0.1"), Decimal("0.07"), Decimal(0)]
    out = []
    for i in range(n):
        kind = rnd.choice(["pod", "pod", "network_volume"])
        charge = (
            rnd.choice([NETWORK_VOLUME, NETWORK_VOLUME_OVER_1TB, PROVIDER_ONLY])
            if kind == "network_volume"
            else rnd.choice(
                [GPU, CONTAINER_DISK, VOLUME_DISK_RUNNING, VOLUME_DISK_STOPPED, PROVIDER_ONLY]
            )
        )
        start = t0 + timedelta(hours=rnd.randrange(24 * 40))
        price = rnd.choice(prices)
        quantity = Decimal(rnd.randrange(1, 3600)) / 3600
        cost = quantity * price
        run = rnd.choice([None, f"run{rnd.randrange(30)}"])
        out.append(
            ChargeRow(
                org_id=rnd.choice(["org_a", "org_b"]),
                resource_kind=kind,
                resource_id=f"res{rnd.randrange(50)}",
                resource_name=rnd.choice([f"tensorant-run-{i % 7}", 'vol, "quoted"']),
                charge=charge,
                start=start,
                end=start + timedelta(hours=1),
                quantity=quantity,
                unit="Hours" if kind == "pod" else "GB-Months",
                unit_price=price,
                list_cost=cost,
                billed_cost=rnd.choice([cost, Decimal("0.123456789012345")]),
                estimated=rnd.random() < 0.5,
                run_id=run,
                project_id=rnd.choice([None, "p1", "p2"]) if run else None,
                datacenter_id=rnd.choice([None, "EU-RO-1", "US-TX-3"]),
                gpu_type_id="NVIDIA A100 80GB PCIe" if charge == GPU else None,
                gpu_count=rnd.choice([0, 1, 2]) if kind == "pod" else 0,
            )
        )
    return out


def _bytes(table: pa.Table) -> tuple[bytes, bytes]:
    csv, parquet = pa.BufferOutputStream(), pa.BufferOutputStream()
    write_focus_csv(table, csv)
    write_focus_parquet(table, parquet)
    return csv.getvalue().to_pybytes(), parquet.getvalue().to_pybytes()


def test_b3_column_wise_focus_table_equals_row_by_row_definition_byte_for_byte() -> None:
    rows = _rows(3000)
    by_rows = pa.Table.from_pylist([focus_record(r, ACCOUNT) for r in rows], schema=FOCUS_SCHEMA)
    by_columns = focus_table(rows, ACCOUNT)
    assert by_columns.schema == FOCUS_SCHEMA
    for name in FOCUS_SCHEMA.names:
        assert by_columns.column(name).equals(by_rows.column(name)), name
    assert _bytes(by_columns) == _bytes(by_rows)


def test_b3_focus_table_of_no_rows_has_the_schema_and_a_header() -> None:
    table = focus_table([], ACCOUNT)
    assert table.num_rows == 0 and table.schema == FOCUS_SCHEMA
    csv, _ = _bytes(table)
    assert csv.decode().splitlines() == [",".join(f'"{n}"' for n in FOCUS_SCHEMA.names)]


def test_b3_the_file_built_ahead_in_batches_is_the_file_of_the_batches_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`focus_bytes` builds each next batch in a helper thread while it writes the last: the
    CSV is the bytes of the whole table, the Parquet the batches' row groups in order."""
    rows = _rows(1000, seed=11)
    monkeypatch.setattr(focus, "BATCH_ROWS", 128)
    charges = ChargeColumns.of_rows(rows)
    batches = list(focus.focus_batches(charges, ACCOUNT))
    assert len(batches) == 8
    csv_whole, _ = _bytes(focus_table(rows, ACCOUNT))
    parquet = pa.BufferOutputStream()
    focus.write_focus_parquet_batches(batches, parquet)
    assert focus.focus_bytes(charges, ACCOUNT, "focus-csv") == csv_whole
    assert focus.focus_bytes(charges, ACCOUNT, "focus-parquet") == parquet.getvalue().to_pybytes()


def test_a_batch_that_fails_to_build_fails_the_export() -> None:
    def tables() -> Iterator[pa.Table]:
        yield pa.table({"n": [1]})
        raise ValueError("bad batch")

    got = focus.built_ahead(tables())
    assert next(got).column("n").to_pylist() == [1]
    with pytest.raises(ValueError, match="bad batch"):
        next(got)


def test_b3_billedcost_is_runpods_amount_and_listcost_our_estimate_in_both_builders() -> None:
    """The row builder and the column builder could agree on the wrong amount: each is checked
    against the row's own billed and estimated amounts, which differ here."""
    start = datetime(2026, 11, 1, 10, tzinfo=UTC)
    row = ChargeRow(
        org_id="org_a",
        resource_kind="pod",
        resource_id="pod1",
        resource_name="tensorant-run-1",
        charge=GPU,
        start=start,
        end=start + timedelta(hours=1),
        quantity=Decimal(1),
        unit="Hours",
        unit_price=Decimal("1.64"),
        list_cost=Decimal("1.64"),
        billed_cost=Decimal("1.70"),
        estimated=False,
        run_id="run1",
        project_id="p1",
        datacenter_id="EU-RO-1",
        gpu_type_id="NVIDIA A100 80GB PCIe",
        gpu_count=1,
    )
    record = focus_record(row, ACCOUNT)
    assert (record["BilledCost"], record["ListCost"]) == (Decimal("1.70"), Decimal("1.64"))
    assert record["EffectiveCost"] == record["ContractedCost"] == Decimal("1.70")
    table = focus_table([row], ACCOUNT)
    assert table.column("BilledCost").to_pylist() == [Decimal("1.70")]
    assert table.column("EffectiveCost").to_pylist() == [Decimal("1.70")]
    assert table.column("ListCost").to_pylist() == [Decimal("1.64")]
