"""Cleanup status (K1): every Pod that bills or may bill, and a warning when credit runs low;
releasing an orphan Pod (terminated until RunPod no longer lists it, K2/K3)."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

from fastapi import APIRouter, Depends, status

from api.deps import AppDep, Caller, ContainerDep, Reader, allowed, settle
from api.routers.common import AUTHENTICATED
from api.run_schemas import Accepted, CleanupItem, CleanupPublic, OrphanReleaseIn
from domain.errors import NotFound
from projections.orphans_view import ORPHANS, orphan_items
from projections.runs_view import RUNS, cleanup_items
from projections.views import CONNECTIONS

router = APIRouter(prefix="/v1/cleanup", tags=["cleanup"], responses=AUTHENTICATED)
RunManager = Annotated[Caller, Depends(allowed("manage_runs"))]


def balance_warning(balance: Decimal | None, burn_per_hour: Decimal, days: float) -> str | None:
    """At $0 RunPod stops or terminates Pods: warn while there is still time to add credit."""
    if balance is None or burn_per_hour <= 0:
        return None
    hours = balance / burn_per_hour
    if hours >= Decimal(str(days)) * 24:
        return None
    return (
        f"the RunPod balance ${balance} covers about {hours:.1f} hours of the running Pods and "
        f"retained storage (${burn_per_hour:.4f}/hour); at $0 RunPod stops Pods with a network "
        "volume and terminates the others — add credit or release what you no longer need"
    )


@router.get("", response_model=CleanupPublic)
def cleanup(caller: Reader, container: ContainerDep) -> CleanupPublic:
    now = container.clock.now()
    docs = [doc for _, doc in container.views.list(RUNS, caller.org_id, "run:")]
    items = cleanup_items(docs, now)
    orphans = [doc for _, doc in container.views.list(ORPHANS, caller.org_id, "pod:")]
    items += orphan_items(orphans, now)
    burn = Decimal(0)
    for item in items:
        burn += Decimal(item["storage_cost_per_hour"])
        billing = item["kind"] in ("running", "terminating", "needs_manual", "orphan")
        if billing and item.get("price_per_hour"):
            burn += Decimal(item["price_per_hour"])
    compute = container.views.get(CONNECTIONS, caller.org_id, "compute") or {}
    storage = container.views.get(CONNECTIONS, caller.org_id, "storage") or {}
    if storage.get("cost_per_month"):
        burn += Decimal(storage["cost_per_month"]) / 730
    balance = Decimal(compute["balance"]) if compute.get("balance") else None
    days = container.balance_warning_days
    return CleanupPublic(
        items=[CleanupItem(**i) for i in items],
        balance_warning=balance_warning(balance, burn, days),
        balance=compute.get("balance"),
        spend_per_hour=compute.get("spend_per_hour"),
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
