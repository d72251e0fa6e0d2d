"""The deployments view (V1, V3): each deployment as the API lists it, and the serving
endpoints the reconciler saw at RunPod.

Documents per organization: `deployment:<id>` -> {id, run_id, base_model, served_model,
adapter_name, endpoint_name, endpoint_id, state, failed_reason, created_at, updated_at};
`endpoint:<endpoint id>` -> {endpoint_id, name, orphan, workers_up, workers_min, workers_max,
price_per_hour, since, seen_at} while RunPod lists it (V3);
(INDEX, `agg:<id>`) -> {org_id}: later events do not name their organization;
(INDEX, `endpoint:<endpoint name>`) -> {org_id}: whose deployments name an endpoint (several
organizations may share one RunPod account: another's endpoint is no orphan of ours).
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from domain import deployment as d
from domain import serving_endpoints as se
from domain.base import event_topics
from domain.ids import id_text
from domain.times import iso
from projections.store.base import INDEX, Doc, ViewBatch, ViewStore
from projections.views.billing import BILLING, bill_hours

DEPLOYMENTS = "deployments"


def deployment_key(deployment_id: str) -> str:
    return f"deployment:{deployment_id}"


def _state(doc: Doc) -> str:
    if doc["gone"]:
        return d.DELETED
    if doc["deleting"]:
        return d.DELETING
    if doc["failed_reason"]:
        return d.FAILED
    return d.READY if doc["endpoint_id"] and doc["adapter_added"] else d.DEPLOYING


class DeploymentsView:
    name = DEPLOYMENTS
    rebuild_weight = 0.1  # a handful of events per deployment; not measured

    @property
    def topics(self) -> list[str]:
        return event_topics(d.Deployment.Event) + event_topics(se.ServingEndpoints.Event)

    def apply(self, batch: ViewBatch, event: Any, position: int) -> None:
        if isinstance(event, se.ServingEndpoints.Event):
            self._endpoint(batch, event)
            return
        if not isinstance(event, d.Deployment.Event):
            return
        dep_id = id_text(event.originator_id)
        if isinstance(event, d.DeploymentRequested):
            batch.put(INDEX, f"agg:{dep_id}", {"org_id": event.org_id})
            batch.put(INDEX, f"endpoint:{event.endpoint_name}", {"org_id": event.org_id})
            doc: Doc = {
                "id": dep_id,
                "run_id": event.run_id,
                "base_model": event.base_model,
                "served_model": event.served_model,
                "adapter_name": event.adapter_name,
                "adapter_sha256": event.adapter_sha256,
                "endpoint_name": event.endpoint_name,
                "endpoint_id": None,
                "adapter_added": False,
                "deleting": False,
                "gone": False,
                "failed_reason": None,
                "endpoints_used": [],
                "created_at": iso(event.timestamp),
            }
            org_id = event.org_id
        else:
            index = batch.get(INDEX, f"agg:{dep_id}")
            if index is None:
                return
            org_id = str(index["org_id"])
            found = batch.get(org_id, deployment_key(dep_id))
            if found is None:
                return
            doc = dict(found)
            self._change(doc, event)
        doc["updated_at"] = iso(event.timestamp)
        doc["state"] = _state(doc)
        batch.put(org_id, deployment_key(dep_id), doc)

    @staticmethod
    def _endpoint(batch: ViewBatch, event: Any) -> None:
        agg = f"agg:{id_text(event.originator_id)}"
        if isinstance(event, se.ServingEndpointsOpened):
            batch.put(INDEX, agg, {"org_id": event.org_id})
            return
        index = batch.get(INDEX, agg)
        if index is None:
            return
        org_id, key = str(index["org_id"]), f"endpoint:{event.endpoint_id}"
        if isinstance(event, se.ServingEndpointGone):
            batch.delete(org_id, key)
            return
        before = batch.get(org_id, key) or {}
        batch.put(
            org_id,
            key,
            {
                "endpoint_id": event.endpoint_id,
                "name": event.name,
                "orphan": event.orphan,
                "workers_up": event.workers_up,
                "workers_min": event.workers_min,
                "workers_max": event.workers_max,
                "price_per_hour": event.price_per_hour,
                "since": before.get("since") or iso(event.timestamp),
                "seen_at": iso(event.timestamp),
            },
        )

    @staticmethod
    def _change(doc: Doc, event: Any) -> None:
        if isinstance(event, d.DeploymentRequestedAgain):
            doc.update(
                adapter_sha256=event.adapter_sha256,
                endpoint_id=None,
                adapter_added=False,
                deleting=False,
                gone=False,
                failed_reason=None,
            )
        elif isinstance(event, d.AdapterAdded):
            doc["adapter_added"] = True
        elif isinstance(event, d.EndpointBound):
            doc["endpoint_id"] = event.endpoint_id
            used = list(doc.get("endpoints_used") or [])
            doc["endpoints_used"] = (
                [*used, event.endpoint_id] if event.endpoint_id not in used else used
            )
        elif isinstance(event, d.DeploymentFailed):
            doc["failed_reason"] = event.reason
        elif isinstance(event, d.DeletionRequested):
            doc["deleting"] = True
        elif isinstance(event, d.AdapterRemoved):
            doc["adapter_added"] = False
        elif isinstance(event, d.DeploymentGone):
            doc["gone"] = True
            doc["endpoint_deleted"] = event.endpoint_deleted


def deployments(views: ViewStore, org_id: str) -> list[Doc]:
    """The organization's deployments, oldest first (deleted ones too)."""
    docs = [doc for _key, doc in views.list(DEPLOYMENTS, org_id, "deployment:")]
    return sorted(docs, key=lambda x: (str(x["created_at"]), str(x["id"])))


def deployment(views: ViewStore, org_id: str, deployment_id: str) -> Doc | None:
    return views.get(DEPLOYMENTS, org_id, deployment_key(deployment_id))


def endpoint_cost(views: ViewStore, org_id: str, endpoint_ids: list[str]) -> Decimal:
    """What RunPod billed for these endpoints (recorded hourly by the billing reconciler, V3);
    an endpoint shared by several deployments is one cost."""
    total = Decimal(0)
    for endpoint_id in endpoint_ids:
        for _key, bill in views.list(BILLING, org_id, f"bill:serverless:{endpoint_id}:"):
            total += sum((Decimal(str(a)) for _s, _e, a in bill_hours(bill)), Decimal(0))
    return total


def unfinished(views: ViewStore, org_id: str, before: str) -> list[str]:
    """Deployments left deploying or deleting since before `before` (an ISO instant)."""
    return [
        str(doc["id"])
        for doc in deployments(views, org_id)
        if doc["state"] in (d.DEPLOYING, d.DELETING) and str(doc["updated_at"]) < before
    ]


def live_on_endpoint(views: ViewStore, org_id: str, endpoint_name: str) -> list[str]:
    """Deployments that still need the endpoint of that name (not deleting, not deleted)."""
    return [
        str(doc["id"])
        for doc in deployments(views, org_id)
        if doc["endpoint_name"] == endpoint_name and doc["state"] not in (d.DELETING, d.DELETED)
    ]


def seen_endpoints(views: ViewStore, org_id: str) -> list[Doc]:
    """The organization's endpoints with our naming that RunPod lists, as last seen (V3)."""
    docs = [doc for _key, doc in views.list(DEPLOYMENTS, org_id, "endpoint:")]
    return sorted(docs, key=lambda x: (str(x["since"]), str(x["endpoint_id"])))


def endpoint_owned(views: ViewStore, org_id: str, endpoint_id: str, name: str) -> bool | None:
    """Whether a deployment keeps the endpoint RunPod lists: True when one of the
    organization's deployments that is not deleted is bound to it, or names it while it has
    no endpoint yet (a create it will adopt) or while deleting (it deletes every endpoint of
    that name); None when another organization's deployments name it (not ours to judge);
    False otherwise: an orphan."""
    index = views.get(DEPLOYMENTS, INDEX, f"endpoint:{name}")
    if index is not None and str(index["org_id"]) != org_id:
        return None
    for doc in deployments(views, org_id):
        if doc["state"] == d.DELETED:
            continue
        if doc["endpoint_id"] == endpoint_id:
            return True
        if doc["endpoint_name"] == name and (not doc["endpoint_id"] or doc["deleting"]):
            return True
    return False
