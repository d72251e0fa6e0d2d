"""Cleanup status (K1): every Pod that bills or may bill, and a warning when credit runs low;
releasing an orphan Pod (terminated until RunPod no longer lists it, K2/K3)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, status

from api.deps import AppDep, Caller, ContainerDep, Reader, allowed, settle
from api.routers.common import AUTHENTICATED
from api.run_schemas import Accepted, CleanupItem, CleanupPublic, OrphanReleaseIn
from domain.errors import NotFound
from projections.reports.cleanup import cleanup_status
from projections.views.orphans import ORPHANS

router = APIRouter(prefix="/v1/cleanup", tags=["cleanup"], responses=AUTHENTICATED)
RunManager = Annotated[Caller, Depends(allowed("manage_runs"))]


@router.get("", response_model=CleanupPublic)
def cleanup(caller: Reader, container: ContainerDep) -> CleanupPublic:
    status = cleanup_status(
        container.views, caller.org_id, container.clock.now(), container.balance_warning_days
    )
    return CleanupPublic(
        items=[CleanupItem(**i) for i in status["items"]],
        balance_warning=status["balance_warning"],
        balance=status["balance"],
        spend_per_hour=status["spend_per_hour"],
    )


@router.post(
    "/orphans/{pod_id}/release", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted
)
def release_orphan(
    pod_id: str, body: OrphanReleaseIn, caller: RunManager, app: AppDep, container: ContainerDep
) -> Accepted:
    """Terminate an orphan Pod (its files are deleted: confirm); confirmed when RunPod no
    longer lists it, `needs_manual` after the configured number of failed attempts."""
    if container.views.get(ORPHANS, caller.org_id, f"pod:{pod_id}") is None:
        raise NotFound(f"orphan Pod {pod_id} not found")
    position = app.reconciler.release_orphan(caller.org_id, pod_id, caller.actor, body.confirm)
    settle(container, position)
    doc = container.views.get(ORPHANS, caller.org_id, f"pod:{pod_id}") or {}
    return Accepted(
        id=pod_id,
        state=str(doc.get("state", "terminating")),
        detail="release requested; terminated once RunPod no longer lists the Pod",
    )
