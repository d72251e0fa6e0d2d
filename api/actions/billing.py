"""Billing (B1–B4): grouped costs, report files, and the reconciliation with RunPod's bill."""

from __future__ import annotations

from typing import Any

from fastapi import Response

from api.deps import Backend, Caller
from projections.reports.costs import costs as grouped_costs
from projections.reports.costs import export as export_file
from projections.reports.costs import period
from projections.reports.reconciliation import reconciliation_report
from projections.views.billing import BILLING


def costs(
    *, backend: Backend, caller: Caller, start: str | None, to: str | None, group_by: str
) -> dict[str, Any]:
    """Costs of the caller's organization: RunPod's bill where known, else our estimate."""
    now = backend.clock.now()
    lo, hi = period(start, to, now)
    return grouped_costs(backend.views, caller.org_id, lo, hi, now, group_by)


def export(
    *, backend: Backend, caller: Caller, start: str | None, to: str | None, format: str
) -> Response:
    """FOCUS 1.2 CSV or Parquet (hourly, UTC, end exclusive) or the plain CSV summary, as an
    attachment."""
    now = backend.clock.now()
    lo, hi = period(start, to, now)
    body, media, name = export_file(backend.views, caller.org_id, lo, hi, now, format)
    return Response(
        body, media_type=media, headers={"Content-Disposition": f'attachment; filename="{name}"'}
    )


def reconciliation(
    *, backend: Backend, caller: Caller, start: str | None, to: str | None
) -> dict[str, Any]:
    """B4: per resource our estimate and the cost, and every billed hour that differs."""
    now = backend.clock.now()
    lo, hi = period(start, to, now)
    return reconciliation_report(backend.views, BILLING, caller.org_id, lo, hi, now)
