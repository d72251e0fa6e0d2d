"""Members of the caller's organization (A1, A2): list, invite, change a role, remove, and a
member's own new token."""

from __future__ import annotations

from typing import Any

from api.deps import Backend, Caller, settler
from api.schemas.identity import (
    InviteIn,
    InviteMade,
    InvitePublic,
    MemberChange,
    MemberCreated,
    MemberIn,
    MemberPublic,
    NewToken,
)
from domain.errors import NotFound
from domain.times import iso
from projections.store.base import ViewStore
from projections.views.identity import ROSTER, roster_key


def members(*, views: ViewStore, caller: Caller) -> list[MemberPublic]:
    """Every member of the caller's organization; never a token or its hash."""
    return [MemberPublic(**doc) for _, doc in views.list(ROSTER, caller.org_id, "member:")]


def member(*, views: ViewStore, caller: Caller, user_id: str) -> MemberPublic:
    doc = views.get(ROSTER, caller.org_id, roster_key(user_id))
    if doc is None:
        raise NotFound("no such member in this organization")
    return MemberPublic(**doc)


def invite(*, backend: Backend, caller: Caller, body: MemberIn) -> MemberCreated:
    """A new member; the token is in this answer only (the server keeps its hash)."""
    made = backend.services.organizations.add_member(
        caller.org_id, body.email, body.role, caller.actor, body.expires_in_days
    )
    settler(backend)(made.position)
    expires = made.token_expires_at
    return MemberCreated(
        user_id=made.user_id,
        email=body.email.strip(),
        role=body.role,
        token=made.token,
        token_expires_at=None if expires is None else iso(expires),
    )


def change_role(*, backend: Backend, caller: Caller, user_id: str, role: str) -> MemberPublic:
    """Effective on the member's next request; the last owner cannot be demoted (409)."""
    member(views=backend.views, caller=caller, user_id=user_id)
    orgs = backend.services.organizations
    settler(backend)(orgs.change_role(caller.org_id, user_id, role, caller.actor))
    return member(views=backend.views, caller=caller, user_id=user_id)


def change(*, backend: Backend, caller: Caller, user_id: str, body: MemberChange) -> MemberPublic:
    """An owner's change of a member's role and/or token expiry (`expires_in_days: null`:
    never); each effective on the member's next request, recorded as its own event."""
    member(views=backend.views, caller=caller, user_id=user_id)
    orgs = backend.services.organizations
    settle = settler(backend)
    if body.role is not None:
        settle(orgs.change_role(caller.org_id, user_id, body.role, caller.actor))
    if "expires_in_days" in body.model_fields_set:
        _, position = orgs.set_token_expiry(
            caller.org_id, user_id, body.expires_in_days, caller.actor
        )
        settle(position)
    return member(views=backend.views, caller=caller, user_id=user_id)


def remove(*, backend: Backend, caller: Caller, user_id: str) -> None:
    """The member's token is refused from the next request on, on every process."""
    member(views=backend.views, caller=caller, user_id=user_id)
    orgs = backend.services.organizations
    settler(backend)(orgs.remove_member(caller.org_id, user_id, caller.actor))


def rotate_own_token(*, backend: Backend, caller: Caller, expires_in_days: int | None) -> NewToken:
    """A new token for the caller, shown once; the one that asked stops working. It keeps the
    expiry the old one had (an owner's choice), or an earlier one the caller asks for (N3)."""
    made = backend.services.organizations.rotate_token(
        caller.org_id, caller.user_id, caller.actor, expires_in_days
    )
    settler(backend)(made.position)
    expires = made.token_expires_at
    return NewToken(token=made.token, token_expires_at=None if expires is None else iso(expires))


def _invite_public(invite_id: str, found: dict[str, Any]) -> InvitePublic:
    return InvitePublic(
        id=invite_id,
        email=found["email"],
        role=found["role"],
        expires_at=iso(found["expires_at"]),
        created_at=iso(found["created_at"]),
    )


def invites(*, backend: Backend, caller: Caller) -> list[InvitePublic]:
    """The organization's open invites (not yet used, revoked or expired), oldest first."""
    found = backend.services.organizations.open_invites(caller.org_id)
    return [_invite_public(i["id"], i) for i in found]


def create_invite(*, backend: Backend, caller: Caller, body: InviteIn) -> InviteMade:
    made = backend.services.organizations.create_invite(
        caller.org_id, body.email, body.role, caller.actor, body.expires_in_days
    )
    settler(backend)(made.position)
    public = next(i for i in invites(backend=backend, caller=caller) if i.id == made.invite_id)
    return InviteMade(**public.model_dump(), token=made.token, link=f"/invite/{made.token}")


def revoke_invite(*, backend: Backend, caller: Caller, invite_id: str) -> None:
    orgs = backend.services.organizations
    settler(backend)(orgs.revoke_invite(caller.org_id, invite_id, caller.actor))


def accept_invite(*, backend: Backend, token: str) -> MemberCreated:
    """The link's holder becomes a member with the invited role; their token is in this answer
    only. The link is used up (InviteInvalid, 410, from then on)."""
    orgs = backend.services.organizations
    invited = orgs.check_invite(token)
    _, made = orgs.accept_invite(token)
    settler(backend)(made.position)
    return MemberCreated.model_validate(
        {
            "user_id": made.user_id,
            "email": invited["email"],
            "role": invited["role"],
            "token": made.token,
        }
    )
