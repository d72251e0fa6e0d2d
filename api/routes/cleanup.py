"""Cleanup status (K1): every Pod that bills or may bill, and a warning when credit runs low;
releasing an orphan Pod (terminated until RunPod no longer lists it, K2/K3)."""

from __future__ import annotations

from fastapi import APIRouter, status

from api.deps import BackendDep, Reader, ReconcilerDep, RunManager, SettleDep, ViewsDep
from api.schemas.cleanup import CleanupItem, CleanupPublic, OrphanReleaseIn
from api.schemas.common import AUTHENTICATED
from api.schemas.runs import Accepted
from projections.reports.cleanup import cleanup_status
from projections.views.orphans import ORPHANS

router = APIRouter(prefix="/v1/cleanup", tags=["cleanup"], responses=AUTHENTICATED)


@router.get("", response_model=CleanupPublic)
def cleanup(caller: Reader, backend: BackendDep) -> CleanupPublic:
    status_ = cleanup_status(
        backend.views, caller.org_id, backend.clock.now(), backend.balance_warning_days
    )
    return CleanupPublic(**{**status_, "items": [CleanupItem(**i) for i in status_["items"]]})


@router.post(
    "/orphans/{pod_id}/release", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted
)
def release_orphan(
    pod_id: str,
    body: OrphanReleaseIn,
    caller: RunManager,
    reconciler: ReconcilerDep,
    settle: SettleDep,
    views: ViewsDep,
) -> Accepted:
    """Terminate an orphan Pod (its files are deleted: confirm); confirmed when RunPod no
    longer lists it, `needs_manual` after the configured number of failed attempts."""
    settle(reconciler.release_orphan(caller.org_id, pod_id, caller.actor, body.confirm))
    doc = views.get(ORPHANS, caller.org_id, f"pod:{pod_id}") or {}
    return Accepted(
        id=pod_id,
        state=str(doc.get("state", "terminating")),
        detail="release requested; terminated once RunPod no longer lists the Pod",
    )
