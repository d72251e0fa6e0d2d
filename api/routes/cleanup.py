"""Cleanup status (K1): every Pod that bills or may bill, and a warning when credit runs low;
releasing an orphan Pod (terminated until RunPod no longer lists it, K2/K3)."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from api.deps import (
    Backend,
    BackendDep,
    Caller,
    ReaderToken,
    ReconcilerDep,
    RunManager,
    SettleDep,
    ViewsDep,
    read_as,
)
from api.responses import json_response
from api.run_list import run_docs_where
from api.schemas.cleanup import CleanupItem, CleanupPublic, OrphanReleaseIn
from api.schemas.common import AUTHENTICATED
from api.schemas.runs import Accepted
from application.trainer_callbacks import TrainerCallbacks
from projections.reports.cleanup import CLEANUP_KIND, cleanup_status
from projections.store.base import Doc
from projections.views.orphans import ORPHANS

POD_STATUS = ("cleanup", "pod_status")
router = APIRouter(prefix="/v1/cleanup", tags=["cleanup"], responses=AUTHENTICATED)


def cleanup(caller: Caller, backend: Backend, trainer: TrainerCallbacks) -> CleanupPublic:
    """Cleanup status as `GET /v1/cleanup` shows it (the console's page too)."""
    now = backend.clock.now()
    # Only the runs whose Pod bills or may bill make items (`cleanup_items`): the store filters.
    runs: dict[str, Doc] = {}

    def with_pods() -> list[Doc]:
        found = run_docs_where(backend.views, caller.org_id, POD_STATUS, tuple(CLEANUP_KIND))
        runs.update((str(e.doc["id"]), e.doc) for e in found)
        return list(runs.values())

    status_ = cleanup_status(
        backend.views, caller.org_id, now, backend.balance_warning_days, with_pods
    )
    items = [CleanupItem(**i) for i in status_["items"]]
    for item in items:  # issue 13: a running Pod whose trainer reports nothing
        doc = runs.get(item.run_id) if item.run_id else None
        since = trainer.stalled_since(doc, now) if doc else None
        if since:
            item.warning = (
                f"no report from the trainer on any channel since {since} while the Pod runs "
                "(it still bills; the runtime limit stops it)"
            )
    return CleanupPublic(**{**status_, "items": items})


@router.get("", response_model=CleanupPublic)
async def get_cleanup(sent: ReaderToken, backend: BackendDep) -> Response:
    trainer = backend.services.trainer  # not a dependency of its own: one fewer to solve
    status_ = await read_as(backend, sent, lambda caller: cleanup(caller, backend, trainer))
    return json_response(CleanupPublic, status_)


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
