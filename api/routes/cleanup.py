"""Cleanup status (K1): every Pod that bills or may bill, and a warning when credit runs low;
releasing an orphan Pod (terminated until RunPod no longer lists it, K2/K3)."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from api.actions import cleanup as cleanup_status
from api.deps import BackendDep, ReaderToken, RunManager, read_as
from api.responses import json_response
from api.schemas.cleanup import CleanupPublic, OrphanReleaseIn
from api.schemas.common import AUTHENTICATED
from api.schemas.runs import Accepted

router = APIRouter(prefix="/v1/cleanup", tags=["cleanup"], responses=AUTHENTICATED)


@router.get("", response_model=CleanupPublic)
async def get_cleanup(sent: ReaderToken, backend: BackendDep) -> Response:
    found = await read_as(
        backend, sent, lambda caller: cleanup_status.status(backend=backend, caller=caller)
    )
    return json_response(CleanupPublic, found)


@router.post(
    "/orphans/{pod_id}/release", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted
)
def release_orphan(
    pod_id: str, body: OrphanReleaseIn, caller: RunManager, backend: BackendDep
) -> Accepted:
    """Terminate an orphan Pod (its files are deleted: confirm); confirmed when RunPod no
    longer lists it, `needs_manual` after the configured number of failed attempts."""
    return cleanup_status.release_orphan(
        backend=backend, caller=caller, pod_id=pod_id, confirm=body.confirm
    )
