"""Benchmark: FOCUS export of N cost rows vs pyarrow writing the same table directly.

    uv run python bench/focus_export.py              # 1,000,000 rows
    uv run python bench/focus_export.py --rows 200000

(a) ours: ChargeRow objects -> `focus_table` -> CSV and Parquet (what the API serves);
(b) pyarrow: the already-built table written with pyarrow.csv / pyarrow.parquet alone.

Target (B3): ours end to end (build + write) within 2x of (b), for CSV and for Parquet.
The machine may be shared and noisy: both wall-clock and this process's CPU time are reported,
and the ratios of each; on a loaded machine the CPU-time ratio is the steadier one.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from projections.reports.charges import GPU, ChargeRow
from projections.reports.focus import focus_table, write_focus_csv, write_focus_parquet

TARGET = 2.0  # ours (build + write) / pyarrow (write of the same table), at most
ACCOUNT = {
    "billing_account_id": "user_bench",
    "billing_account_name": "RunPod account user_bench",
    "org_name": "Bench",
}


def rows(n: int) -> list[ChargeRow]:
    t0 = datetime(2026, 11, 1, tzinfo=UTC)
    price = Decimal("1.64")
    return [
        ChargeRow(
            org_id="org",
            resource_kind="pod",
            resource_id=f"pod{i % 500}",
            resource_name=f"tensorant-run-{i % 500}",
            charge=GPU,
            start=t0 + timedelta(hours=i // 500),
            end=t0 + timedelta(hours=i // 500 + 1),
            quantity=Decimal(1),
            unit="Hours",
            unit_price=price,
            list_cost=price,
            billed_cost=price,
            estimated=bool(i % 2),
            run_id=f"run{i % 500}",
            project_id="p",
            datacenter_id="EU-RO-1",
            gpu_type_id="NVIDIA A100 80GB PCIe",
            gpu_count=1,
        )
        for i in range(n)
    ]


def timed(label: str, n: int, fn: object) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of fn()."""
    t, c = time.perf_counter(), time.process_time()
    fn()  # type: ignore[operator]
    dt, dc = time.perf_counter() - t, time.process_time() - c
    print(f"{label:34s}: {n:,} rows in {dt:7.2f}s wall {dc:7.2f}s CPU = {n / dt:10,.0f} rows/s")
    return dt, dc


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    n = parser.parse_args().rows
    data = rows(n)
    table: list[pa.Table] = []
    build = timed("ours: rows -> FOCUS table", n, lambda: table.append(focus_table(data, ACCOUNT)))
    ours_csv = timed(
        "ours: write CSV", n, lambda: write_focus_csv(table[0], pa.BufferOutputStream())
    )
    ours_pq = timed(
        "ours: write Parquet", n, lambda: write_focus_parquet(table[0], pa.BufferOutputStream())
    )
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    raw_csv = timed(
        "pyarrow: write_csv (same table)",
        n,
        lambda: pacsv.write_csv(table[0], pa.BufferOutputStream()),
    )
    raw_pq = timed(
        "pyarrow: write_table (same table)",
        n,
        lambda: pq.write_table(table[0], pa.BufferOutputStream(), compression="zstd"),
    )
    for fmt, ours, raw in (("CSV", ours_csv, raw_csv), ("Parquet", ours_pq, raw_pq)):
        for i, clock in ((0, "wall"), (1, "CPU ")):
            ratio = (build[i] + ours[i]) / raw[i]
            verdict = "PASS" if ratio <= TARGET else "MISS"
            print(
                f"{fmt:7s} {clock} end-to-end ours/pyarrow = {ratio:5.2f}x"
                f"  target <= {TARGET:.0f}x  {verdict}"
                f"   (build {build[i] / raw[i]:.2f}x + write {ours[i] / raw[i]:.2f}x)"
            )


if __name__ == "__main__":
    main()
