"""`tensorant demo` walks the whole guide through the HTTP API and exits 0 (issues 4, 5, 7)."""

from __future__ import annotations

import csv
import subprocess
import sys
from io import StringIO
from pathlib import Path

from rich.console import Console

from entrypoints.demo.run import run_demo

ROOT = Path(__file__).resolve().parents[2]


def test_the_demo_walks_the_guide_end_to_end_and_writes_the_cost_report(tmp_path: Path) -> None:
    out = StringIO()
    assert run_demo(Console(file=out, width=200), out_dir=tmp_path) == 0, out.getvalue()
    text = out.getvalue()
    assert text.count("✓") == 23 and "✗" not in text
    for step in (
        "A read-only key is flagged",
        "A T4 is refused",
        "Training logs stream",
        "Cleanup shows the retained Pod",
        "Cleanup ends empty",
        "The audit history verifies",
    ):
        assert step in text
    with (tmp_path / "tensorant-demo-costs.focus.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert rows and {"BilledCost", "ChargePeriodStart", "x_RunId"} <= set(rows[0])


def test_the_console_script_runs_the_demo(tmp_path: Path) -> None:
    """The README's first command, as a user types it (from a directory of their own)."""
    exe = Path(sys.executable).parent / "tensorant"
    result = subprocess.run(
        [str(exe), "demo"], cwd=tmp_path, capture_output=True, text=True, timeout=240, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "All 23 steps behaved as the guide says" in result.stdout.replace("\n", " ")
    assert (tmp_path / "tensorant-demo-costs.focus.csv").exists()
