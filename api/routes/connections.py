"""The RunPod compute connection (C1–C5) and the connections overview."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status

from api.actions import connections
from api.actions.connections import checks
from api.deps import BackendDep, Owner, ReaderToken, read_as
from api.responses import json_response
from api.schemas.common import AUTHENTICATED
from api.schemas.connections import (
    ApiKeyIn,
    ComputeCard,
    Connections,
    HubCard,
    HubTokenIn,
    RegistryCard,
    RegistryCredentialsIn,
)

router = APIRouter(prefix="/v1/connections", tags=["connections"], responses=AUTHENTICATED)


@router.get("", response_model=Connections)
async def get_connections(sent: ReaderToken, backend: BackendDep) -> Response:
    found = await read_as(
        backend, sent, lambda caller: connections.overview(views=backend.views, caller=caller)
    )
    return json_response(Connections, found)


@router.post("/runpod", status_code=status.HTTP_201_CREATED, response_model=ComputeCard)
def connect_runpod(
    request: Request, body: ApiKeyIn, caller: Owner, backend: BackendDep
) -> ComputeCard:
    """C1: the key is checked against RunPod before it is stored."""
    return connections.connect_runpod(
        backend=backend, caller=caller, checks=checks(request), api_key=body.api_key
    )


@router.post("/runpod/rotate", response_model=ComputeCard)
def rotate_runpod(
    request: Request, body: ApiKeyIn, caller: Owner, backend: BackendDep
) -> ComputeCard:
    """C2: the new key is checked first; in-flight work continues with it."""
    return connections.rotate_runpod(
        backend=backend, caller=caller, checks=checks(request), api_key=body.api_key
    )


@router.delete("/runpod", status_code=status.HTTP_204_NO_CONTENT, response_class=Response)
def disconnect_runpod(caller: Owner, backend: BackendDep) -> Response:
    """C4: refused while Pods depend on the key."""
    connections.disconnect_runpod(backend=backend, caller=caller)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.put("/huggingface", response_model=HubCard)
def connect_huggingface(
    request: Request, body: HubTokenIn, caller: Owner, backend: BackendDep
) -> HubCard:
    """C7: the token is checked against the Hugging Face Hub (whoami) before it is stored;
    a connected token is replaced (rotated, recording both fingerprints)."""
    return connections.connect_huggingface(
        backend=backend, caller=caller, checks=checks(request), token=body.token
    )


@router.delete("/huggingface", status_code=status.HTTP_204_NO_CONTENT, response_class=Response)
def disconnect_huggingface(caller: Owner, backend: BackendDep) -> Response:
    """C7: the token leaves the vault; drafts on gated models are refused again."""
    connections.disconnect_huggingface(backend=backend, caller=caller)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.put("/registry", response_model=RegistryCard)
def attach_registry(
    body: RegistryCredentialsIn, caller: Owner, backend: BackendDep
) -> RegistryCard:
    """A private registry's credentials for a baked trainer image (`TENSORANT_TRAINER_IMAGE`):
    registered with RunPod and sent on each Pod create; the secret stays in the vault."""
    return connections.attach_registry(
        backend=backend, caller=caller, username=body.username, password=body.password
    )


@router.delete("/registry", status_code=status.HTTP_204_NO_CONTENT, response_class=Response)
def remove_registry(caller: Owner, backend: BackendDep) -> Response:
    """RunPod and the vault forget the credentials; removing none is done already."""
    connections.remove_registry(backend=backend, caller=caller)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
