"""Benchmark: the FOCUS export of ~N charge rows vs pyarrow writing the same table.

    uv run python bench/focus_export.py                       # ~1,000,000 rows, every hour billed
    uv run python bench/focus_export.py --rows 200000
    uv run python bench/focus_export.py --billed 0            # no RunPod bills recorded yet

(a) ours: `projections.reports.costs.export(views, org, from, to, now, fmt)`, the function behind
    `GET /v1/billing/export` and `tensorant costs export`, from the billing view's documents in a
    SQLite view store to the file's bytes: read the Pod, volume and bill documents, compute the
    charges (`charge_columns`), build the FOCUS table, write CSV or Parquet.
(b) pyarrow: the very table (a) builds, written by pyarrow.csv.write_csv /
    pyarrow.parquet.write_table (zstd) alone.

Before the timed rounds, one export of each format prints pyarrow's peak memory (the pool's
high-water mark) and the file's size.

The view is seeded by writing the billing view's documents directly (the shape
`projections.views.billing` writes, bills by `bill_document`), not by replaying events: Pods that
run ~half the month, stop for 3 h 25 min and resume (odd minutes, so partial hours), a few network
volumes, and RunPod's hourly bills for the first `--billed` fraction of each Pod's hours (one
amount, so one stretch per Pod and day).

Target: (a) within 2x of (b), for CSV and for Parquet. The machine may be
shared and noisy: (a) and (b) alternate for `--repeat` rounds, wall-clock and this process's CPU
time are both reported, and the median ratio is judged; on a loaded machine the CPU-time ratio
is the steadier one.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from domain.times import iso
from projections.reports.charges import charge_columns
from projections.reports.costs import account_of, export
from projections.reports.focus import focus_table
from projections.store.sqlite import SQLiteViewStore
from projections.views.billing import BILLING, bill_document, bill_key

TARGET = 2.0  # ours end to end / pyarrow writing the same table, at most
ORG = "org_bench"
LO, HI = datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC)
NOW = datetime(2026, 12, 15, tzinfo=UTC)
POD_HOURS = 700
ROWS_PER_POD = 3 * (POD_HOURS - 4) + 4 + 3  # running hours x 3 charges, stopped hours, partials
VOLUMES = 10


def seed(store: SQLiteViewStore, pods: int, billed: float) -> None:
    """The billing view's documents for `pods` Pods and VOLUMES network volumes."""
    hour = timedelta(hours=1)
    with store.batch(BILLING) as batch:
        for p in range(pods):
            start = LO + timedelta(minutes=7 * (p % 8) + 1)
            stop = start + timedelta(hours=POD_HOURS // 2, minutes=13)
            resume = stop + timedelta(hours=3, minutes=25)
            end = start + timedelta(hours=POD_HOURS)
            running = {"state": "running", "cost_per_hour": "1.64"}
            batch.put(
                ORG,
                f"pod:pod{p}",
                {
                    "pod_id": f"pod{p}",
                    "pod_name": f"tensorant-run-{p}",
                    "run_id": f"run{p}",
                    "project_id": f"project{p % 7}",
                    "gpu_type_id": "NVIDIA A100 80GB PCIe",
                    "gpu_count": 1,
                    "datacenter_id": "EU-RO-1",
                    "container_gb": 20,
                    "volume_gb": 50,
                    "segments": [
                        {**running, "start": iso(start), "end": iso(stop)},
                        {
                            "state": "stopped",
                            "start": iso(stop),
                            "end": iso(resume),
                            "cost_per_hour": "0",
                        },
                        {**running, "start": iso(resume), "end": iso(end)},
                    ],
                },
            )
            t = start.replace(minute=0)
            days: dict[str, list[tuple[str, str, str]]] = {}
            for _ in range(int(POD_HOURS * billed)):
                days.setdefault(iso(t)[:10], []).append((iso(t), iso(t + hour), "1.646849315"))
                t += hour
            for day, hours in days.items():
                doc = bill_document("pod", f"pod{p}", hours, iso(t + 2 * hour))
                batch.put(ORG, bill_key("pod", f"pod{p}", day), doc)
        for v in range(VOLUMES):
            batch.put(
                ORG,
                f"volume:vol{v}",
                {
                    "volume_id": f"vol{v}",
                    "datacenter_id": "EU-RO-1",
                    "segments": [{"start": iso(LO), "end": None, "size_gb": 500 + 300 * v}],
                },
            )
        batch.set_position(1)


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of fn()."""
    t, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t, time.process_time() - c


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--billed", type=float, default=1.0, help="fraction of hours billed")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the median is judged")
    args = parser.parse_args()
    pods = max(1, round(args.rows / ROWS_PER_POD))
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteViewStore(str(Path(tmp) / "views.db"))
        t = time.perf_counter()
        seed(store, pods, args.billed)
        print(f"seeded {pods} Pods, {VOLUMES} volumes in {time.perf_counter() - t:.1f}s")
        # Peak memory of one export: pyarrow's high-water mark, which only grows, so it is read
        # before anything bigger is allocated (Parquet, then CSV, then the baseline's table).
        pool = pa.default_memory_pool()
        for fmt in ("focus-parquet", "focus-csv"):
            size = len(export(store, ORG, LO, HI, NOW, fmt)[0])
            print(
                f"peak Arrow memory up to one {fmt} export: {pool.max_memory() / 1e6:,.0f} MB"
                f" ({size / 1e6:,.1f} MB file)"
            )
        table = focus_table(
            charge_columns(store, BILLING, ORG, LO, HI, NOW), account_of(store, ORG)
        )
        n = table.num_rows
        billed = n - int(pc.sum(table.column("x_Estimated").cast(pa.int64())).as_py())
        print(f"{n:,} FOCUS rows ({billed:,} billed by RunPod), {table.nbytes / 1e6:.0f} MB")
        runs: dict[str, Callable[[], Any]] = {
            "ours focus-csv": partial(export, store, ORG, LO, HI, NOW, "focus-csv"),
            "pyarrow write_csv": lambda: pacsv.write_csv(table, pa.BufferOutputStream()),
            "ours focus-parquet": partial(export, store, ORG, LO, HI, NOW, "focus-parquet"),
            "pyarrow write_table": lambda: pq.write_table(
                table, pa.BufferOutputStream(), compression="zstd"
            ),
            "  of which charge_columns": partial(charge_columns, store, BILLING, ORG, LO, HI, NOW),
        }
        ratios: dict[str, list[tuple[float, float]]] = {"focus-csv": [], "focus-parquet": []}
        for round_ in range(1, args.repeat + 1):
            took = {name: timed(fn) for name, fn in runs.items()}
            for name, (wall, cpu) in took.items():
                print(f"round {round_} {name:26s}: {wall:7.2f}s wall {cpu:7.2f}s CPU")
            for fmt, raw in (
                ("focus-csv", "pyarrow write_csv"),
                ("focus-parquet", "pyarrow write_table"),
            ):
                ours, base = took[f"ours {fmt}"], took[raw]
                ratios[fmt].append((ours[0] / base[0], ours[1] / base[1]))
        store.close()
    print(f"ratios ours/pyarrow (export from the view / write of the same table), {n:,} rows:")
    for fmt, values in ratios.items():
        for i, clock in ((0, "wall"), (1, "CPU ")):
            each = [v[i] for v in values]
            ratio = statistics.median(each)
            verdict = "PASS" if ratio <= TARGET else "MISS"
            rounds = " ".join(f"{v:.2f}" for v in each)
            print(
                f"{fmt:13s} {clock} median {ratio:5.2f}x  target <= {TARGET:.0f}x  {verdict}"
                f"   (rounds: {rounds})"
            )


if __name__ == "__main__":
    main()
