"""Webhook endpoints and their deliveries (R20); owners only (the routes check the role)."""

from __future__ import annotations

from api.deps import Backend, Caller, settler
from api.schemas.webhooks import DeliveryList, DeliveryPublic, WebhookCreated, WebhookPublic
from application.webhooks import WebhookService
from domain.errors import NotFound
from projections.store.base import ViewStore
from projections.views import webhooks as view
from projections.webhooks import deliveries as delivered


def _service(backend: Backend) -> WebhookService:
    service = backend.services.webhooks
    assert service is not None, "build_services wires the webhook service"
    return service


def endpoints(*, views: ViewStore, caller: Caller) -> list[WebhookPublic]:
    return [WebhookPublic(**doc) for doc in view.endpoints(views, caller.org_id)]


def endpoint(*, views: ViewStore, caller: Caller, webhook_id: str) -> WebhookPublic:
    doc = view.endpoint(views, caller.org_id, webhook_id)
    if doc is None:  # another organization's endpoint looks exactly like a missing one (A4)
        raise NotFound(f"webhook {webhook_id} not found")
    return WebhookPublic(**doc)


def create(*, backend: Backend, caller: Caller, url: str, events: list[str]) -> WebhookCreated:
    made = _service(backend).register(caller.org_id, url, events, caller.actor)
    settler(backend)(made.position)
    found = endpoint(views=backend.views, caller=caller, webhook_id=made.endpoint_id)
    return WebhookCreated(**found.model_dump(), secret=made.secret)


def remove(*, backend: Backend, caller: Caller, webhook_id: str) -> None:
    endpoint(views=backend.views, caller=caller, webhook_id=webhook_id)
    settler(backend)(_service(backend).remove(caller.org_id, webhook_id, caller.actor))


def deliveries(*, views: ViewStore, caller: Caller, webhook_id: str, limit: int) -> DeliveryList:
    endpoint(views=views, caller=caller, webhook_id=webhook_id)
    docs = delivered(views, caller.org_id, webhook_id, limit)
    return DeliveryList(deliveries=[DeliveryPublic(**d) for d in docs])
