"""`/v1/webhooks` (R20): owners register endpoints; deliveries are listed per endpoint."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response, status

from api.actions import webhooks
from api.deps import BackendDep, ViewsDep, WebhookOwner
from api.schemas.common import AUTHENTICATED
from api.schemas.webhooks import DeliveryList, WebhookCreated, WebhookIn, WebhookPublic

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"], responses=AUTHENTICATED)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=WebhookCreated)
def create(body: WebhookIn, caller: WebhookOwner, backend: BackendDep) -> WebhookCreated:
    """R20: the URL passes the SSRF guard; the signing secret is in this answer only."""
    return webhooks.create(backend=backend, caller=caller, url=body.url, events=list(body.events))


@router.get("", response_model=list[WebhookPublic])
def list_webhooks(caller: WebhookOwner, views: ViewsDep) -> list[WebhookPublic]:
    return webhooks.endpoints(views=views, caller=caller)


@router.delete("/{webhook_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete(webhook_id: str, caller: WebhookOwner, backend: BackendDep) -> Response:
    """Stops deliveries to the endpoint (pending ones are cancelled) and forgets its secret."""
    webhooks.remove(backend=backend, caller=caller, webhook_id=webhook_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{webhook_id}/deliveries", response_model=DeliveryList)
def deliveries(
    webhook_id: str,
    caller: WebhookOwner,
    views: ViewsDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> DeliveryList:
    """Each delivery, newest first: status, attempts, each attempt's status code or error, and
    when the next attempt is due."""
    return webhooks.deliveries(views=views, caller=caller, webhook_id=webhook_id, limit=limit)
