"""Billing (B1–B4): grouped costs, report files, and the reconciliation with RunPod's bill."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from api.deps import ClockDep, Finance, ViewsDep
from api.schemas.common import AUTHENTICATED
from projections.reports.costs import costs, export, period
from projections.reports.reconciliation import reconciliation_report
from projections.views.billing import BILLING

router = APIRouter(prefix="/v1/billing", tags=["billing"], responses=AUTHENTICATED)

From = Annotated[
    str | None, Query(alias="from", description="ISO 8601 (UTC); default: month start")
]
To = Annotated[str | None, Query(description="ISO 8601 (UTC), exclusive; default: now")]


@router.get("/costs")
def get_costs(
    caller: Finance,
    views: ViewsDep,
    clock: ClockDep,
    start: From = None,
    to: To = None,
    group_by: str = "run",
) -> dict[str, Any]:
    """Costs of the caller's organization: RunPod's bill where known, else our estimate."""
    now = clock.now()
    lo, hi = period(start, to, now)
    return costs(views, caller.org_id, lo, hi, now, group_by)


@router.get(
    "/export",
    response_class=Response,
    responses={
        200: {
            "description": "The report file (Content-Disposition: attachment)",
            "content": {
                "text/csv": {},
                "application/vnd.apache.parquet": {},
                "application/octet-stream": {},
            },
        }
    },
)
def get_export(
    caller: Finance,
    views: ViewsDep,
    clock: ClockDep,
    start: From = None,
    to: To = None,
    format: str = "focus-csv",
) -> Response:
    """FOCUS 1.2 CSV or Parquet (hourly, UTC, end exclusive) or the plain CSV summary."""
    now = clock.now()
    lo, hi = period(start, to, now)
    body, media, name = export(views, caller.org_id, lo, hi, now, format)
    return Response(
        body, media_type=media, headers={"Content-Disposition": f'attachment; filename="{name}"'}
    )


@router.get("/reconciliation")
def get_reconciliation(
    caller: Finance, views: ViewsDep, clock: ClockDep, start: From = None, to: To = None
) -> dict[str, Any]:
    """B4: per resource our estimate and the cost, and every billed hour that differs."""
    now = clock.now()
    lo, hi = period(start, to, now)
    return reconciliation_report(views, BILLING, caller.org_id, lo, hi, now)
