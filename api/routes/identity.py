"""Identity: who the caller is and what the organization can do (A1, S7)."""

from __future__ import annotations

from fastapi import APIRouter, Response, status

from api.actions import members
from api.deps import BackendDep, MemberManager, Reader, ViewsDep
from api.schemas.common import AUTHENTICATED
from api.schemas.identity import (
    Capabilities,
    InviteIn,
    InviteMade,
    InvitePublic,
    Me,
    MemberChange,
    MemberCreated,
    MemberIn,
    MemberPublic,
    NewToken,
    OrganizationPublic,
    RotateIn,
)
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


# ---------------------------------------------------------------- members (A1, A2)
@router.get("/members", response_model=list[MemberPublic])
def list_members(caller: MemberManager, views: ViewsDep) -> list[MemberPublic]:
    """Every member of the caller's organization; never a token or its hash."""
    return members.members(views=views, caller=caller)


@router.post("/members", status_code=status.HTTP_201_CREATED, response_model=MemberCreated)
def invite(body: MemberIn, caller: MemberManager, backend: BackendDep) -> MemberCreated:
    """A new member; the token is in this response only (the server keeps its hash)."""
    return members.invite(backend=backend, caller=caller, body=body)


@router.post("/members/invites", status_code=status.HTTP_201_CREATED, response_model=InviteMade)
def create_invite(body: InviteIn, caller: MemberManager, backend: BackendDep) -> InviteMade:
    """A single-use, expiring invite link (`link`, shown once; only its hash is stored): its
    holder opens it in the console, accepts, and is signed in as a member with `role`."""
    return members.create_invite(backend=backend, caller=caller, body=body)


@router.get("/members/invites", response_model=list[InvitePublic])
def list_invites(caller: MemberManager, backend: BackendDep) -> list[InvitePublic]:
    """Open invites (not used, revoked or expired); never a link or its hash."""
    return members.invites(backend=backend, caller=caller)


@router.delete("/members/invites/{invite_id}", status_code=status.HTTP_204_NO_CONTENT)
def revoke_invite(invite_id: str, caller: MemberManager, backend: BackendDep) -> Response:
    """The link stops working; an unknown, used or revoked invite is 404."""
    members.revoke_invite(backend=backend, caller=caller, invite_id=invite_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.patch("/members/{user_id}", response_model=MemberPublic)
def change_member(
    user_id: str, body: MemberChange, caller: MemberManager, backend: BackendDep
) -> MemberPublic:
    """A role and/or a token expiry (`expires_in_days`; null: never), effective on the member's
    next request; the last owner cannot be demoted (409). Rotating keeps the expiry."""
    return members.change(backend=backend, caller=caller, user_id=user_id, body=body)


@router.delete("/members/{user_id}", status_code=status.HTTP_204_NO_CONTENT)
def remove(user_id: str, caller: MemberManager, backend: BackendDep) -> Response:
    """The member's token is refused from the next request on, on every process."""
    members.remove(backend=backend, caller=caller, user_id=user_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/me/token/rotate", response_model=NewToken)
def rotate_own_token(caller: Reader, backend: BackendDep, body: RotateIn | None = None) -> NewToken:
    """A new token for the caller, shown once; the one that made this request stops working.
    It keeps the old token's expiry (an owner's choice); `expires_in_days` may make it earlier,
    never later (the answer's `token_expires_at` says which)."""
    return members.rotate_own_token(
        backend=backend, caller=caller, expires_in_days=body.expires_in_days if body else None
    )
