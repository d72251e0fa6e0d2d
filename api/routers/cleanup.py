"""Cleanup status (K1): every Pod that bills or may bill, and a warning when credit runs low."""

from __future__ import annotations

from decimal import Decimal

from fastapi import APIRouter

from api.deps import ContainerDep, Reader
from api.routers.common import AUTHENTICATED
from api.run_schemas import CleanupItem, CleanupPublic
from projections.runs_view import RUNS, cleanup_items
from projections.views import CONNECTIONS

router = APIRouter(prefix="/v1/cleanup", tags=["cleanup"], responses=AUTHENTICATED)


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
    orphans = getattr(container, "orphans", None)
    if orphans is not None:
        items += orphans(caller.org_id, now)
    burn = Decimal(0)
    for item in items:
        burn += Decimal(item["storage_cost_per_hour"])
        if item["kind"] in ("running", "terminating", "needs_manual", "orphan") and item.get("price_per_hour"):
            burn += Decimal(item["price_per_hour"])
    compute = container.views.get(CONNECTIONS, caller.org_id, "compute") or {}
    storage = container.views.get(CONNECTIONS, caller.org_id, "storage") or {}
    if storage.get("cost_per_month"):
        burn += Decimal(storage["cost_per_month"]) / 730
    balance = Decimal(compute["balance"]) if compute.get("balance") else None
    days = getattr(container.settings, "balance_warning_days", 7.0)
    return CleanupPublic(
        items=[CleanupItem(**i) for i in items],
        balance_warning=balance_warning(balance, burn, days),
        balance=compute.get("balance"), spend_per_hour=compute.get("spend_per_hour"),
    )
