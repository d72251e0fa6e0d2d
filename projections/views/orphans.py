"""The orphan view (K1): Pods with our naming that belong to no live run, with what they cost.

Documents per organization: `pod:<pod id>` -> {pod_id, pod_name, run_id, state, status,
cost_per_hour, disk, since, found_at, ended_at, attempts, last_error}. `since` is when RunPod
started billing it as best known (found time minus the uptime RunPod reported).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import domain.orphans as o
from domain.base import event_topics
from domain.ids import id_text
from domain.times import iso
from projections.store.base import INDEX, Doc, ViewBatch

ORPHANS = "orphans"  # (INDEX, "agg:<aggregate id>") -> {"org_id"}


class OrphansView:
    name = ORPHANS
    rebuild_weight = 1.4  # see `AuditView.rebuild_weight`

    @property
    def topics(self) -> list[str]:
        """Orphan events only: its live batches decode nothing else."""
        return event_topics(o.OrphanPods.Event)

    def apply(self, batch: ViewBatch, event: Any, position: int) -> None:
        if not isinstance(event, o.OrphanPods.Event):
            return
        agg = f"agg:{id_text(event.originator_id)}"
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


def live_orphans(store: Any, org_id: str) -> list[Doc]:
    return [doc for _, doc in store.list(ORPHANS, org_id, "pod:") if doc["state"] in o.ORPHAN_LIVE]
