"""Settings → Members: who is in the organization, with what role; an owner adds a member (the
token is shown once, as the API's answer shows it), changes a role or a token's expiry, or removes
a member (A1, A2, N3)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response

from api.actions import members
from api.console.forms import Errors, count, status_of, submit, text
from api.console.web import Page, SignedIn, checked_form, pages, redirect, render
from api.schemas.identity import (
    InviteIn,
    InviteMade,
    MemberChange,
    MemberCreated,
    MemberIn,
    RoleIn,
)
from domain.access import ROLES

router = pages()
HERE = "/settings/members"


def _page(
    p: Page,
    errors: Errors,
    created: MemberCreated | None = None,
    invited: InviteMade | None = None,
) -> Response:
    caller = p.require("manage_members")
    found = members.members(views=p.backend.views, caller=caller)
    link = None
    if invited is not None:
        link = str(p.request.base_url).rstrip("/") + invited.link
    return render(
        p,
        "members.html",
        status=status_of(errors),
        members=sorted(found, key=lambda m: (m.created_at, m.email)),
        roles=ROLES,
        created=created,
        invited=invited,
        invite_link=link,
        invites=members.invites(backend=p.backend, caller=caller),
        errors=errors,
    )


@router.get(HERE)
def members_page(p: SignedIn) -> Response:
    return _page(p, {})


@router.post(HERE)
async def add_member(request: Request, p: SignedIn) -> Response:
    form = await checked_form(request, p)
    caller = p.require("manage_members")
    errors: Errors = {}
    made: list[MemberCreated] = []

    def invite() -> None:
        fields: dict[str, Any] = {"email": text(form, "email"), "role": text(form, "role")}
        if text(form, "expires_in_days"):
            fields["expires_in_days"] = count(text(form, "expires_in_days"))
        body = MemberIn.model_validate(fields)
        made.append(members.invite(backend=p.backend, caller=caller, body=body))

    submit(p, errors, "email", invite)
    return _page(p, errors, made[0] if made else None)  # the token is on this page only


@router.post(HERE + "/{user_id}/role")
async def change_role(user_id: str, request: Request, p: SignedIn) -> Response:
    form = await checked_form(request, p)
    caller = p.require("manage_members")
    errors: Errors = {}

    def change() -> object:
        body = RoleIn.model_validate({"role": text(form, "role")})
        return members.change_role(
            backend=p.backend, caller=caller, user_id=user_id, role=body.role
        )

    if submit(p, errors, f"member-{user_id}", change):
        return redirect(HERE)
    return _page(p, errors)


@router.post(HERE + "/{user_id}/expiry")
async def change_expiry(user_id: str, request: Request, p: SignedIn) -> Response:
    """N3: an owner sets, changes or lifts (left empty) a member's token expiry."""
    form = await checked_form(request, p)
    caller = p.require("manage_members")
    errors: Errors = {}

    def change() -> object:
        days = text(form, "expires_in_days")
        body = MemberChange.model_validate({"expires_in_days": count(days) if days else None})
        return members.change(backend=p.backend, caller=caller, user_id=user_id, body=body)

    if submit(p, errors, f"member-{user_id}", change):
        return redirect(HERE)
    return _page(p, errors)


@router.post(HERE + "/{user_id}/remove")
async def remove_member(user_id: str, request: Request, p: SignedIn) -> Response:
    await checked_form(request, p)
    caller = p.require("manage_members")
    errors: Errors = {}

    def remove() -> None:
        members.remove(backend=p.backend, caller=caller, user_id=user_id)

    if submit(p, errors, f"member-{user_id}", remove):
        return redirect(HERE)
    return _page(p, errors)


@router.post(HERE + "/invites")
async def create_invite(request: Request, p: SignedIn) -> Response:
    """A1: a single-use, expiring link for someone to join with a role; shown on this page once."""
    form = await checked_form(request, p)
    caller = p.require("manage_members")
    errors: Errors = {}
    made: list[InviteMade] = []

    def invite() -> None:
        fields: dict[str, Any] = {"email": text(form, "email"), "role": text(form, "role")}
        if text(form, "expires_in_days"):
            fields["expires_in_days"] = count(text(form, "expires_in_days"))
        body = InviteIn.model_validate(fields)
        made.append(members.create_invite(backend=p.backend, caller=caller, body=body))

    submit(p, errors, "invite", invite)
    return _page(p, errors, invited=made[0] if made else None)


@router.post(HERE + "/invites/{invite_id}/revoke")
async def revoke_invite(invite_id: str, request: Request, p: SignedIn) -> Response:
    await checked_form(request, p)
    caller = p.require("manage_members")
    errors: Errors = {}

    def revoke() -> None:
        members.revoke_invite(backend=p.backend, caller=caller, invite_id=invite_id)

    if submit(p, errors, f"invite-{invite_id}", revoke):
        return redirect(HERE)
    return _page(p, errors)
