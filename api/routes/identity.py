"""Identity: who the caller is and what the organization can do (A1, S7)."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import Reader, ViewsDep
from api.schemas.common import AUTHENTICATED
from api.schemas.identity import Capabilities, Me, OrganizationPublic
from domain.errors import NotFound
from projections.views.connections import CONNECTIONS
from projections.views.identity import ORGANIZATIONS

router = APIRouter(prefix="/v1", tags=["identity"], responses=AUTHENTICATED)


@router.get("/me", response_model=Me)
def me(caller: Reader) -> Me:
    return Me(
        user_id=caller.user_id, email=caller.email, organization_id=caller.org_id, role=caller.role
    )


@router.get("/organization", response_model=OrganizationPublic)
def organization(caller: Reader, views: ViewsDep) -> OrganizationPublic:
    org = views.get(ORGANIZATIONS, caller.org_id, "organization")
    if org is None:
        raise NotFound("organization not found")
    compute = views.get(CONNECTIONS, caller.org_id, "compute") or {}
    storage = views.get(CONNECTIONS, caller.org_id, "storage") or {}
    compute_ok = compute.get("status") == "connected"
    storage_ok = storage.get("status") == "connected"
    return OrganizationPublic(
        id=org["id"],
        name=org["name"],
        mode=org["mode"],
        capabilities=Capabilities(
            training=compute_ok and storage_ok,
            managed_serving=compute_ok and storage_ok and storage.get("kind") == "runpod_volume",
        ),
    )
