"""B3: the FOCUS 1.2 CSV and Parquet exports pass the FinOps Foundation's focus-validator.

The validator needs Python 3.12; it runs through `uv tool run` (installed from PyPI the first
time, offline afterwards) with `--block-download` so it uses its bundled FOCUS 1.2 rules.
It reads its currency list from `focus_validator/rules/currency_codes.csv` relative to the
working directory, so the test copies that file into a scratch directory first.

A failed rule counts unless it is one branch of an OR composite that passed: FOCUS 1.2's
InvoiceId-C-003-C is "null when no invoice (C-004) OR not null when invoiced (C-005)", and the
validator prints the branch not taken as FAIL while the composite passes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from projections.reports.costs import export
from tests.conftest import unavailable
from tests.integration.billing.conftest import T0, SandboxWorld

VALIDATOR = "focus-validator==2.2.1"
# focus-validator 2.2.1 leaves pyarrow unpinned but pins numpy < 2; newer pyarrow needs numpy 2.
UV_TOOL = ["tool", "run", "--python", "3.12", "--with", "pyarrow<21"]


def _env() -> dict[str, str]:
    # pyenv shims: 3.12 for the validator, 3.11 still on the path for the `uv` shim itself.
    return {**os.environ, "PYENV_VERSION": "3.12.1:3.11.7"}


def _uv() -> str:
    uv = os.environ.get("UV") or shutil.which("uv")  # `uv run` names itself in UV
    if uv is None:
        pytest.fail("uv is not on PATH")
    return uv


def _require_python312() -> None:
    probe = subprocess.run(
        [_uv(), "python", "find", "3.12"], env=_env(), capture_output=True, text=True, check=False
    )
    if probe.returncode != 0:
        unavailable("no Python 3.12 interpreter for focus-validator")


def _validate(path: Path, workdir: Path) -> str:
    rules = workdir / "focus_validator" / "rules"
    if not (rules / "currency_codes.csv").exists():
        rules.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                _uv(),
                *UV_TOOL,
                "--from",
                VALIDATOR,
                "python",
                "-c",
                "import focus_validator, os, shutil; d = os.path.join(os.path.dirname("
                "focus_validator.__file__), 'rules'); "
                "[shutil.copy(os.path.join(d, f), 'focus_validator/rules/') "
                "for f in ('currency_codes.csv', 'model-1.2.0.1.json')]",
            ],
            cwd=workdir,
            env=_env(),
            check=True,
            capture_output=True,
            timeout=300,
        )
    done = subprocess.run(
        [
            _uv(),
            *UV_TOOL,
            VALIDATOR,
            "--data-file",
            str(path),
            "--validate-version",
            "1.2",
            "--block-download",
            "--show-violations",
        ],
        cwd=workdir,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-3000:]
    return out


def _failed(out: str, workdir: Path) -> list[str]:
    """Failed rules, minus untaken branches of OR composites that passed."""
    failed = re.findall(r"^\S*\s*(\S+): FAIL", out, flags=re.MULTILINE)
    passed = set(re.findall(r"^\S*\s*(\S+): PASS", out, flags=re.MULTILINE))
    model = json.loads((workdir / "focus_validator/rules/model-1.2.0.1.json").read_text())
    or_parents: dict[str, set[str]] = {}
    for name, rule in model["ModelRules"].items():
        req = rule.get("ValidationCriteria", {}).get("Requirement", {})
        if req.get("CheckFunction") == "OR":
            for item in req.get("Items", []):
                if item.get("ModelRuleId"):
                    or_parents.setdefault(item["ModelRuleId"], set()).add(name)
    return [f for f in failed if not (or_parents.get(f, set()) & passed)]


def test_b3_focus_csv_and_parquet_of_a_month_pass_focus_validator(
    sandbox_month: SandboxWorld, tmp_path: Path
) -> None:
    _require_python312()
    w = sandbox_month
    views, now = w.container.views, w.container.clock.now()
    acme, globex = (h.org_id for h in w.orgs)
    # Part of the month billed by RunPod, the rest still our estimate (x_Estimated).
    w.container.services.billing.reconcile(
        acme, T0, T0 + timedelta(days=10), settle_lag=timedelta(0)
    )
    w.container.catch_up()
    csv_bytes, media, name = export(views, acme, T0, now, now, "focus-csv")
    assert media == "text/csv" and name.endswith(".csv")
    parquet_bytes, _, _ = export(views, globex, T0, now, now, "focus-parquet")
    (tmp_path / "acme.csv").write_bytes(csv_bytes)
    (tmp_path / "globex.parquet").write_bytes(parquet_bytes)
    table = pq.read_table(tmp_path / "globex.parquet")
    assert table.num_rows > 20 and "x_RunId" in table.column_names
    assert csv_bytes.count(b"\n") > 24 * 29  # the volume bills every hour of the month
    for path in (tmp_path / "acme.csv", tmp_path / "globex.parquet"):
        out = _validate(path, tmp_path)
        assert "PASS" in out
        assert "CostAndUsage-D-000-M" not in re.findall(r"(\S+): FAIL", out)
        assert _failed(out, tmp_path) == [], out[-3000:]


def test_v3_focus_csv_with_serving_endpoint_hours_passes_focus_validator(tmp_path: Path) -> None:
    """RunPod Serverless rows (their own ServiceName, no price of ours) keep the file valid."""
    from datetime import UTC, datetime

    from domain.times import iso
    from projections.views.billing import BILLING, bill_key, with_charge
    from tests.unit.billing.test_charge_columns import HI, LO, NOW, ORG, _store

    _require_python312()
    store = _store(tmp_path, 6)
    with store.batch(BILLING) as batch:
        for h in (4, 5, 9):
            start = datetime(2026, 11, 3, h, tzinfo=UTC)
            c = {"kind": "serverless", "resource_id": "ep1", "start": iso(start)}
            c |= {"end": iso(start + timedelta(hours=1)), "amount": "0.0123"}
            key = bill_key("serverless", "ep1", c["start"])
            batch.put(ORG, key, with_charge(batch.get(ORG, key), c, iso(NOW)))
        batch.set_position(2)
    body, _, _ = export(store, ORG, LO, HI, NOW, "focus-csv")
    assert body.count(b"RunPod Serverless") == 3
    (tmp_path / "serving.csv").write_bytes(body)
    out = _validate(tmp_path / "serving.csv", tmp_path)
    assert "PASS" in out
    assert _failed(out, tmp_path) == [], out[-3000:]
