"""Your token (A1, N3): every member sees when their own token expires and replaces it; the new
one is shown once and this console session moves to it (the old token stops working)."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from api.actions import members
from api.console.forms import Errors, status_of, submit
from api.console.web import (
    Page,
    SignedIn,
    caller_of,
    checked_form,
    pages,
    render,
    set_cookie,
    store,
)
from api.schemas.identity import NewToken
from application.organizations import hash_token

router = pages()
HERE = "/settings/token"


def _page(p: Page, errors: Errors, new: NewToken | None = None) -> Response:
    me = members.member(views=p.backend.views, caller=p.me, user_id=p.me.user_id)
    return render(p, "own_token.html", status=status_of(errors), me=me, new=new, errors=errors)


@router.get(HERE)
def own_token_page(p: SignedIn) -> Response:
    return _page(p, {})


@router.post(HERE + "/rotate")
async def rotate(request: Request, p: SignedIn) -> Response:
    await checked_form(request, p)
    errors: Errors = {}
    made: list[NewToken] = []

    def replace() -> None:
        made.append(members.rotate_own_token(backend=p.backend, caller=p.me, expires_in_days=None))

    if not submit(p, errors, "rotate", replace):
        return _page(p, errors)
    sessions = store(request)
    sessions.drop(p.session.id)
    session = sessions.new(hash_token(made[0].token))  # the old token no longer signs in
    moved = Page(request, session, caller_of(p.backend, session))
    response = _page(moved, {}, made[0])
    set_cookie(request, response, session)
    return response
