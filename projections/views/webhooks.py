"""The webhooks view (R20): an organization's registered endpoints, as the API lists them.

Documents per organization: `endpoint:<id>` -> {id, url, events, created_at}; a removed endpoint's
document is deleted. (INDEX, `agg:<id>`) -> {org_id}: the removal event does not name its
organization. Never the secret: it is in the vault only. What was delivered is the outbox's
(`projections/webhooks.py`, view `webhook_outbox`).
"""

from __future__ import annotations

from typing import Any

from domain.base import event_topics
from domain.ids import id_text
from domain.times import iso
from domain.webhook import WebhookEndpoint, WebhookRegistered, WebhookRemoved
from projections.store.base import INDEX, Doc, ViewBatch, ViewStore

WEBHOOKS = "webhooks"


def endpoint_key(endpoint_id: str) -> str:
    return f"endpoint:{endpoint_id}"


class WebhooksView:
    name = WEBHOOKS
    # See `AuditView.rebuild_weight`: a handful of events per organization, one small document
    # each; not measured (the benchmark's log holds no webhook events).
    rebuild_weight = 0.1

    @property
    def topics(self) -> list[str]:
        return event_topics(WebhookEndpoint.Event)

    def apply(self, batch: ViewBatch, event: Any, position: int) -> None:
        if not isinstance(event, WebhookEndpoint.Event):
            return
        endpoint_id = id_text(event.originator_id)
        if isinstance(event, WebhookRegistered):
            batch.put(INDEX, f"agg:{endpoint_id}", {"org_id": event.org_id})
            batch.put(
                event.org_id,
                endpoint_key(endpoint_id),
                {
                    "id": endpoint_id,
                    "url": event.url,
                    "events": list(event.events),
                    "created_at": iso(event.timestamp),
                },
            )
        elif isinstance(event, WebhookRemoved):
            index = batch.get(INDEX, f"agg:{endpoint_id}")
            if index is not None:
                batch.delete(str(index["org_id"]), endpoint_key(endpoint_id))


def endpoints(views: ViewStore, org_id: str) -> list[Doc]:
    """The organization's endpoints, oldest first."""
    docs = [doc for _key, doc in views.list(WEBHOOKS, org_id, "endpoint:")]
    return sorted(docs, key=lambda d: (str(d["created_at"]), str(d["id"])))


def endpoint(views: ViewStore, org_id: str, endpoint_id: str) -> Doc | None:
    return views.get(WEBHOOKS, org_id, endpoint_key(endpoint_id))
