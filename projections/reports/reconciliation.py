"""The reconciliation report (B4): every hour where our estimate and RunPod's bill differ."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from decimal import Decimal
from typing import Any

from domain.rates import cents
from domain.times import iso
from projections.reports.charges import ChargeRow, charge_rows

ZERO = Decimal(0)


def reconciliation_report(
    store: Any,
    view: str,
    org_id: str,
    lo: datetime,
    hi: datetime,
    now: datetime,
    tolerance: Decimal = Decimal("0.000001"),
) -> dict[str, Any]:
    """Per resource: estimate, bill, and each billed hour whose difference exceeds `tolerance`."""
    rows = charge_rows(store, view, org_id, lo, hi, now)
    hours: dict[tuple[str, str, datetime], list[ChargeRow]] = defaultdict(list)
    for row in rows:
        hours[row.hour_key].append(row)
    resources: dict[tuple[str, str], dict[str, Any]] = {}
    differences = []
    for (kind, rid, start), group in sorted(hours.items(), key=lambda kv: (kv[0][2], kv[0][:2])):
        estimate = sum((g.list_cost for g in group), ZERO)
        billed = sum((g.billed_cost for g in group), ZERO)
        res = resources.setdefault(
            (kind, rid),
            {
                "resource_kind": kind,
                "resource_id": rid,
                "run_id": group[0].run_id,
                "estimate": ZERO,
                "cost": ZERO,
                "billed_hours": 0,
                "estimated_hours": 0,
            },
        )
        res["estimate"] += estimate
        res["cost"] += billed
        if any(g.estimated for g in group):
            res["estimated_hours"] += 1
            continue
        res["billed_hours"] += 1
        if abs(billed - estimate) > tolerance:
            differences.append(
                {
                    "resource_kind": kind,
                    "resource_id": rid,
                    "hour": iso(start),
                    "estimate": str(estimate),
                    "billed": str(billed),
                    "difference": str(billed - estimate),
                }
            )
    lines = [
        {
            **r,
            "estimate": str(cents(r["estimate"])),
            "cost": str(cents(r["cost"])),
            "difference": str(cents(r["cost"]) - cents(r["estimate"])),
        }
        for r in resources.values()
    ]
    return {
        "from": iso(lo),
        "to": iso(hi),
        "currency": "USD",
        "resources": lines,
        "differences": differences,
    }
