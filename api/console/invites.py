"""Invite links (A1): the holder of a link an owner made opens it, accepts, and is signed in as a
new member with the invited role; their token is shown once. A used, revoked, expired or unknown
link answers a page that says so (410), never a member."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from api.actions import members
from api.console.problems import shown
from api.console.sessions import CSRF_COOKIE, SessionsFull
from api.console.web import Page, PageDep, caller_of, checked_form, pages, render, set_cookie, store
from application.organizations import hash_token
from domain.errors import TensorantError
from domain.times import iso

router = pages()


def _refused(p: Page, exc: TensorantError) -> Response:
    return render(p, "invite.html", status=exc.status, invite=None, error=shown(exc))


@router.get("/invite/{token}")
def invite_page(token: str, p: PageDep) -> Response:
    try:
        found = p.backend.services.organizations.check_invite(token)
    except TensorantError as exc:
        return _refused(p, exc)
    return render(
        p, "invite.html", invite={**found, "expires_at": iso(found["expires_at"])}, error=None
    )


@router.post("/invite/{token}")
async def accept(token: str, request: Request, p: PageDep) -> Response:
    await checked_form(request, p)
    try:
        made = members.accept_invite(backend=p.backend, token=token)
    except TensorantError as exc:
        return _refused(p, exc)
    sessions = store(request)
    sessions.drop(p.session.id)
    try:
        session = sessions.new(hash_token(made.token))  # a new id on sign-in: no fixation
    except SessionsFull as e:
        return _refused(p, e)
    signed_in = Page(request, session, caller_of(p.backend, session))
    response = render(signed_in, "invite_accepted.html", created=made)
    set_cookie(request, response, session)
    response.delete_cookie(CSRF_COOKIE, path="/")  # signed in: the session has its own
    return response
