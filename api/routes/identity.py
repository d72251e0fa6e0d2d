"""Identity: who the caller is and what the organization can do (A1, S7)."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from api.deps import MemberManager, OrganizationsDep, Reader, SettleDep, ViewsDep
from api.schemas.common import AUTHENTICATED
from api.schemas.identity import (
    Capabilities,
    Me,
    MemberCreated,
    MemberIn,
    MemberPublic,
    NewToken,
    OrganizationPublic,
    RoleIn,
    RotateIn,
)
from domain.errors import NotFound
from domain.times import iso
from projections.views.connections import CONNECTIONS
from projections.views.identity import ORGANIZATIONS, ROSTER, roster_key

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


# ---------------------------------------------------------------- members (A1, A2)
@router.get("/members", response_model=list[MemberPublic])
def list_members(caller: MemberManager, views: ViewsDep) -> list[MemberPublic]:
    """Every member of the caller's organization; never a token or its hash."""
    return [MemberPublic(**doc) for _, doc in views.list(ROSTER, caller.org_id, "member:")]


@router.post("/members", status_code=status.HTTP_201_CREATED, response_model=MemberCreated)
def invite(
    body: MemberIn, caller: MemberManager, orgs: OrganizationsDep, settle: SettleDep
) -> MemberCreated:
    """A new member; the token is in this response only (the server keeps its hash)."""
    made = orgs.add_member(caller.org_id, body.email, body.role, caller.actor, body.expires_in_days)
    settle(made.position)
    expires = made.token_expires_at
    return MemberCreated(
        user_id=made.user_id,
        email=body.email.strip(),
        role=body.role,
        token=made.token,
        token_expires_at=None if expires is None else iso(expires),
    )


def _member(views: ViewsDep, org_id: str, user_id: str) -> MemberPublic:
    doc = views.get(ROSTER, org_id, roster_key(user_id))
    if doc is None:
        raise NotFound("no such member in this organization")
    return MemberPublic(**doc)


@router.patch("/members/{user_id}", response_model=MemberPublic)
def change_role(
    user_id: str,
    body: RoleIn,
    caller: MemberManager,
    orgs: OrganizationsDep,
    settle: SettleDep,
    views: ViewsDep,
) -> MemberPublic:
    """Effective on the member's next request; the last owner cannot be demoted (409)."""
    _member(views, caller.org_id, user_id)
    settle(orgs.change_role(caller.org_id, user_id, body.role, caller.actor))
    return _member(views, caller.org_id, user_id)


@router.delete("/members/{user_id}", status_code=status.HTTP_204_NO_CONTENT)
def remove(
    user_id: str, caller: MemberManager, orgs: OrganizationsDep, settle: SettleDep, views: ViewsDep
) -> Response:
    """The member's token is refused from the next request on, on every process."""
    _member(views, caller.org_id, user_id)
    settle(orgs.remove_member(caller.org_id, user_id, caller.actor))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/me/token/rotate", response_model=NewToken)
def rotate_own_token(
    caller: Reader, orgs: OrganizationsDep, settle: SettleDep, body: RotateIn | None = None
) -> NewToken:
    """A new token for the caller, shown once; the one that made this request stops working."""
    made = orgs.rotate_token(
        caller.org_id, caller.user_id, caller.actor, body.expires_in_days if body else None
    )
    settle(made.position)
    expires = made.token_expires_at
    return NewToken(token=made.token, token_expires_at=None if expires is None else iso(expires))
