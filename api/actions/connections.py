"""The RunPod compute connection (C1–C5) and the connections overview."""

from __future__ import annotations

from collections.abc import Callable

from fastapi import Request

from api.deps import Backend, Caller, settler
from api.schemas.connections import ComputeCard, Connections, HubCard, RegistryCard, StorageCard
from api.throttle import Throttle
from projections.store.base import ViewStore
from projections.views.connections import (
    CONNECTIONS,
    empty_compute_card,
    empty_hub_card,
    empty_storage_card,
)

_CARDS = ("compute", "storage", "huggingface")


def checks(request: Request) -> Throttle:
    """Failed RunPod key and storage checks, counted per organization."""
    throttle: Throttle = request.app.state.check_throttle
    return throttle


def compute_card(*, views: ViewStore, org_id: str) -> ComputeCard:
    return ComputeCard(**(views.get(CONNECTIONS, org_id, "compute") or empty_compute_card()))


def storage_card(*, views: ViewStore, org_id: str) -> StorageCard:
    return StorageCard(**(views.get(CONNECTIONS, org_id, "storage") or empty_storage_card()))


def overview(*, views: ViewStore, caller: Caller) -> Connections:
    """Every card, as `GET /v1/connections` and the console's Settings → Connections show them."""
    cards = views.get_many(CONNECTIONS, caller.org_id, _CARDS)  # one round trip for all
    return Connections(
        compute=ComputeCard(**(cards.get("compute") or empty_compute_card())),
        storage=StorageCard(**(cards.get("storage") or empty_storage_card())),
        huggingface=HubCard(**(cards.get("huggingface") or empty_hub_card())),
    )


def hub_card(*, views: ViewStore, org_id: str) -> HubCard:
    return HubCard(**(views.get(CONNECTIONS, org_id, "huggingface") or empty_hub_card()))


def connect_huggingface(
    *, backend: Backend, caller: Caller, checks: Throttle, token: str
) -> HubCard:
    """C7: the token is checked against the Hub (whoami) before it is stored; a connected token
    is replaced (rotated) the same way. Failed checks are slowed per organization."""
    service = backend.services.hub
    settler(backend)(
        checks.guard(caller.org_id, lambda: service.connect(caller.org_id, caller.actor, token))
    )
    return hub_card(views=backend.views, org_id=caller.org_id)


def disconnect_huggingface(*, backend: Backend, caller: Caller) -> None:
    """C7: the token leaves the vault."""
    settler(backend)(backend.services.hub.disconnect(caller.org_id, caller.actor))


def _checked_key(
    backend: Backend,
    caller: Caller,
    checks: Throttle,
    command: Callable[[str, str, str], int],
    api_key: str,
) -> ComputeCard:
    """Connect or rotate: RunPod checks the key; failed checks are slowed per organization."""
    settler(backend)(
        checks.guard(caller.org_id, lambda: command(caller.org_id, caller.actor, api_key))
    )
    return compute_card(views=backend.views, org_id=caller.org_id)


def connect_runpod(
    *, backend: Backend, caller: Caller, checks: Throttle, api_key: str
) -> ComputeCard:
    """C1: the key is checked against RunPod before it is stored."""
    return _checked_key(backend, caller, checks, backend.services.connections.connect, api_key)


def rotate_runpod(
    *, backend: Backend, caller: Caller, checks: Throttle, api_key: str
) -> ComputeCard:
    """C2: the new key is checked first; in-flight work continues with it."""
    service = backend.services.connections
    return _checked_key(backend, caller, checks, service.rotate_key, api_key)


def disconnect_runpod(*, backend: Backend, caller: Caller) -> None:
    """C4: refused while Pods depend on the key."""
    settler(backend)(backend.services.connections.disconnect(caller.org_id, caller.actor))


def registry_card(backend: Backend, org_id: str) -> RegistryCard:
    conn = backend.services.log.connection(org_id)
    return RegistryCard(
        attached=conn.registry_auth_id is not None,
        registry_auth_id=conn.registry_auth_id,
        fingerprint=conn.registry_fingerprint,
    )


def attach_registry(
    *, backend: Backend, caller: Caller, username: str, password: str
) -> RegistryCard:
    """A baked image's registry credentials: registered with RunPod, kept only in the vault."""
    service = backend.services.connections
    settler(backend)(service.attach_registry(caller.org_id, caller.actor, username, password))
    return registry_card(backend, caller.org_id)


def remove_registry(*, backend: Backend, caller: Caller) -> None:
    settler(backend)(backend.services.connections.remove_registry(caller.org_id, caller.actor))
