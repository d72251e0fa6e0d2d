"""The RunPod compute connection (C1–C5) and the connections overview."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import APIRouter, Request, Response, status

from api.deps import (
    BackendDep,
    Caller,
    ConnectionsDep,
    Owner,
    ReaderToken,
    Settle,
    SettleDep,
    ViewsDep,
    read_as,
)
from api.responses import json_response
from api.schemas.common import AUTHENTICATED
from api.schemas.connections import ApiKeyIn, ComputeCard, Connections, StorageCard
from api.throttle import Throttle
from projections.store.base import ViewStore
from projections.views.connections import CONNECTIONS, empty_compute_card, empty_storage_card


def checks(request: Request) -> Throttle:
    """Failed RunPod key and storage checks, counted per organization (issue 14)."""
    throttle: Throttle = request.app.state.check_throttle
    return throttle


router = APIRouter(prefix="/v1/connections", tags=["connections"], responses=AUTHENTICATED)


_CARDS = ("compute", "storage")


def compute_card(views: ViewStore, org_id: str) -> ComputeCard:
    return ComputeCard(**(views.get(CONNECTIONS, org_id, "compute") or empty_compute_card()))


def storage_card(views: ViewStore, org_id: str) -> StorageCard:
    return StorageCard(**(views.get(CONNECTIONS, org_id, "storage") or empty_storage_card()))


def connections(caller: Caller, views: ViewStore) -> Connections:
    """The overview as `GET /v1/connections` shows it (the console's page too)."""
    cards = views.get_many(CONNECTIONS, caller.org_id, _CARDS)  # one round trip for both
    return Connections(
        compute=ComputeCard(**(cards.get("compute") or empty_compute_card())),
        storage=StorageCard(**(cards.get("storage") or empty_storage_card())),
    )


@router.get("", response_model=Connections)
async def get_connections(sent: ReaderToken, backend: BackendDep) -> Response:
    overview = await read_as(backend, sent, lambda caller: connections(caller, backend.views))
    return json_response(Connections, overview)


def _checked_key(
    request: Request,
    caller: Caller,
    command: Callable[[str, str, str], int],
    api_key: str,
    settle: Settle,
    views: ViewStore,
) -> ComputeCard:
    """Connect or rotate: RunPod checks the key; failed checks are slowed per organization."""
    settle(
        checks(request).guard(caller.org_id, lambda: command(caller.org_id, caller.actor, api_key))
    )
    return compute_card(views, caller.org_id)


@router.post("/runpod", status_code=status.HTTP_201_CREATED, response_model=ComputeCard)
def connect_runpod(
    request: Request,
    body: ApiKeyIn,
    caller: Owner,
    service: ConnectionsDep,
    settle: SettleDep,
    views: ViewsDep,
) -> ComputeCard:
    """C1: the key is checked against RunPod before it is stored."""
    return _checked_key(request, caller, service.connect, body.api_key, settle, views)


@router.post("/runpod/rotate", response_model=ComputeCard)
def rotate_runpod(
    request: Request,
    body: ApiKeyIn,
    caller: Owner,
    service: ConnectionsDep,
    settle: SettleDep,
    views: ViewsDep,
) -> ComputeCard:
    """C2: the new key is checked first; in-flight work continues with it."""
    return _checked_key(request, caller, service.rotate_key, body.api_key, settle, views)


@router.delete("/runpod", status_code=status.HTTP_204_NO_CONTENT, response_class=Response)
def disconnect_runpod(caller: Owner, service: ConnectionsDep, settle: SettleDep) -> Response:
    """C4: refused while Pods depend on the key."""
    settle(service.disconnect(caller.org_id, caller.actor))
    return Response(status_code=status.HTTP_204_NO_CONTENT)
