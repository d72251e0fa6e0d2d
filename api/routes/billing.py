"""Billing (B1–B4): grouped costs, report files, and the reconciliation with RunPod's bill."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from api.actions import billing
from api.deps import BackendDep, Finance
from api.schemas.common import AUTHENTICATED

router = APIRouter(prefix="/v1/billing", tags=["billing"], responses=AUTHENTICATED)

From = Annotated[
    str | None, Query(alias="from", description="ISO 8601 (UTC); default: month start")
]
To = Annotated[str | None, Query(description="ISO 8601 (UTC), exclusive; default: now")]


@router.get("/costs")
def get_costs(
    caller: Finance,
    backend: BackendDep,
    start: From = None,
    to: To = None,
    group_by: str = "run",
) -> dict[str, Any]:
    """Costs of the caller's organization: RunPod's bill where known, else our estimate."""
    return billing.costs(backend=backend, caller=caller, start=start, to=to, group_by=group_by)


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
    backend: BackendDep,
    start: From = None,
    to: To = None,
    format: str = "focus-csv",
) -> Response:
    """FOCUS 1.2 CSV or Parquet (hourly, UTC, end exclusive) or the plain CSV summary."""
    return billing.export(backend=backend, caller=caller, start=start, to=to, format=format)


@router.get("/reconciliation")
def get_reconciliation(
    caller: Finance, backend: BackendDep, start: From = None, to: To = None
) -> dict[str, Any]:
    """B4: per resource our estimate and the cost, and every billed hour that differs."""
    return billing.reconciliation(backend=backend, caller=caller, start=start, to=to)
