"""The orphan view (K1): Pods with our naming that belong to no live run, with what they cost.

Documents per organization: `pod:<pod id>` -> {pod_id, pod_name, run_id, state, status,
cost_per_hour, disk, since, found_at, ended_at, attempts, last_error}. `since` is when RunPod
started billing it as best known (found time minus the uptime RunPod reported).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import domain.orphans as o
from domain.rates import running_disk_per_hour, stopped_disk_per_hour
from projections.runs_view import iso, parse
from projections.view import Doc, ViewBatch

ORPHANS = "orphans"
INDEX = "_"  # (INDEX, "agg:<aggregate id>") -> {"org_id"}


class OrphansView:
    name = ORPHANS

    def apply(self, batch: ViewBatch, event: Any, position: int) -> None:
        if not isinstance(event, o.OrphanPods.Event):
            return
        agg = f"agg:{event.originator_id}"
        if isinstance(event, o.OrphanPodsOpened):
            batch.put(INDEX, agg, {"org_id": event.org_id})
            return
        index = batch.get(INDEX, agg)
        if index is None:
            return
        org_id = index["org_id"]
        key = f"pod:{getattr(event, 'pod_id', '')}"
        if isinstance(event, o.OrphanPodFound):
            since = event.timestamp - timedelta(seconds=max(event.uptime_seconds, 0))
            batch.put(
                org_id,
                key,
                {
                    "pod_id": event.pod_id,
                    "pod_name": event.pod_name,
                    "run_id": event.run_id,
                    "state": o.ORPHAN_OPEN,
                    "status": event.status,
                    "cost_per_hour": str(event.cost_per_hour),
                    "gpu_type_id": event.gpu_type_id,
                    "datacenter_id": event.datacenter_id,
                    "disk": {"container_gb": event.container_disk_gb, "volume_gb": event.volume_gb},
                    "since": iso(since),
                    "found_at": iso(event.timestamp),
                    "ended_at": None,
                    "attempts": 0,
                    "last_error": None,
                },
            )
            return
        doc = batch.get(org_id, key)
        if doc is None:
            return
        if isinstance(event, o.OrphanReleaseRequested):
            doc["state"] = o.ORPHAN_TERMINATING
        elif isinstance(event, o.OrphanTerminationFailed):
            doc.update(attempts=event.attempt, last_error=event.error)
            if event.needs_manual:
                doc["state"] = o.ORPHAN_NEEDS_MANUAL
        elif isinstance(event, o.OrphanPodGone | o.OrphanPodClaimed):
            doc.update(state=o.ORPHAN_GONE, ended_at=iso(event.timestamp))
            doc["outcome"] = (
                "adopted"
                if isinstance(event, o.OrphanPodClaimed)
                else "terminated"
                if event.terminated
                else "vanished"
            )
        batch.put(org_id, key, doc)


def orphan_costs(doc: Doc, now: datetime) -> tuple[Decimal, Decimal, Decimal]:
    """(cost so far, storage cost per hour, compute price per hour); unknown bills as running."""
    start = parse(doc["since"])
    end = parse(doc["ended_at"]) if doc.get("ended_at") else now
    hours = Decimal(str(max((end - start).total_seconds(), 0))) / 3600
    disk = doc["disk"]
    if doc["status"] == "stopped":
        storage = stopped_disk_per_hour(disk["volume_gb"], start)
        price = Decimal(0)
    else:
        storage = running_disk_per_hour(disk["container_gb"], disk["volume_gb"], start)
        price = Decimal(doc["cost_per_hour"])
    return (price + storage) * hours, storage, price


def orphan_items(docs: list[Doc], now: datetime) -> list[Doc]:
    """K1: orphans still at RunPod (released or not), as cleanup items of kind `orphan`."""
    items = []
    for doc in docs:
        if doc["state"] not in o.ORPHAN_LIVE:
            continue
        cost, storage, price = orphan_costs(doc, now)
        items.append(
            {
                "kind": "orphan",
                "pod_id": doc["pod_id"],
                "run_id": doc["run_id"],
                "run_state": None,
                "since": doc["since"],
                "cost_so_far": str(cost.quantize(Decimal("0.0001"))),
                "storage_cost_per_hour": str(storage.quantize(Decimal("0.000001"))),
                "price_per_hour": str(price),
                "attempts": doc["attempts"],
                "last_error": doc["last_error"],
                "pod_status": doc["state"],
                "pod_name": doc["pod_name"],
            }
        )
    return sorted(items, key=lambda i: (i["since"] or "", i["pod_id"] or ""))


def live_orphans(store: Any, org_id: str) -> list[Doc]:
    return [doc for _, doc in store.list(ORPHANS, org_id, "pod:") if doc["state"] in o.ORPHAN_LIVE]
