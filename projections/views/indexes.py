"""What the command side asks of the read side, answered from the views: the application's
RunIndex and OwnedResources ports, and the reconciler's heartbeat."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import domain.orphans as o
import domain.run as r
from domain.times import iso, parse_iso
from projections.store.base import INDEX
from projections.views.billing import BILLING
from projections.views.connections import CONNECTIONS
from projections.views.deployments import DEPLOYMENTS, deployments
from projections.views.orphans import ORPHANS, live_orphans
from projections.views.runs import RUNS, is_live

RECONCILER = "reconciler"  # the reconciler's heartbeat; no events, so rebuilds leave it alone


class ViewRunIndex:
    """The application's RunIndex port, read from the run, orphan and connection views
    (eventually consistent by design: the reconciler is level-triggered and runs again)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def live_runs(self) -> list[tuple[str, str]]:
        return [
            (org_id, doc["id"])
            for org_id, key, doc in self.store.iter_all(RUNS)
            if org_id != INDEX and key.startswith("run:") and is_live(doc)
        ]

    def live_pods(self, org_id: str) -> int:
        """C4: run Pods running, retained or awaiting cleanup, and orphans not yet gone."""
        runs = sum(
            1
            for _, doc in self.store.list(RUNS, org_id, "run:")
            if doc["cleanup"]["pod_status"] in r.POD_LIVE
        )
        return runs + len(live_orphans(self.store, org_id))

    def busy_org_ids(self) -> set[str]:
        """K2 at scale: organizations with something of ours at RunPod besides their runs'
        Pods: an orphan not yet gone, or a deployment that is not deleted (its endpoint)."""
        busy = {
            org_id
            for org_id, key, doc in self.store.iter_all(ORPHANS)
            if org_id != INDEX and key.startswith("pod:") and doc["state"] in o.ORPHAN_LIVE
        }
        busy.update(
            org_id
            for org_id, key, doc in self.store.iter_all(DEPLOYMENTS)
            if org_id != INDEX and key.startswith("deployment:") and not doc["gone"]
        )
        return busy

    def org_ids(self) -> list[str]:
        return sorted(
            org_id
            for org_id, key, doc in self.store.iter_all(CONNECTIONS)
            if key == "compute" and doc.get("status") == "connected"
        )

    def reconciled(self, at: datetime, organizations: int) -> None:
        with self.store.batch(RECONCILER) as batch:
            batch.put(INDEX, "heartbeat", {"at": iso(at), "organizations": organizations})


def last_reconciled(store: Any) -> datetime | None:
    doc = store.get(RECONCILER, INDEX, "heartbeat")
    return parse_iso(doc["at"]) if doc else None


class ViewOwnedResources:
    """The billing reconciler's OwnedResources port, read from the billing view (B4)."""

    def __init__(self, store: Any) -> None:
        self.store = store

    def owned(self, org_id: str) -> set[tuple[str, str]]:
        out: set[tuple[str, str]] = set()
        for key, _ in self.store.list(BILLING, org_id, "pod:"):
            out.add(("pod", key.removeprefix("pod:")))
        for key, _ in self.store.list(BILLING, org_id, "volume:"):
            out.add(("network_volume", key.removeprefix("volume:")))
        for doc in deployments(self.store, org_id):  # V3: every endpoint a deployment used
            for endpoint_id in doc.get("endpoints_used") or []:
                out.add(("serverless", str(endpoint_id)))
        return out
