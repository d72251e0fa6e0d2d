"""Signing in and out, and the home page."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import Response

from api.client_address import client_address
from api.console.forms import text
from api.console.problems import Shown
from api.console.sessions import COOKIE, CSRF_COOKIE, SessionsFull
from api.console.web import PageDep, checked_form, pages, redirect, render, set_cookie, store
from api.throttle import Throttle, TooManyFailures
from application.organizations import hash_token
from projections.store.base import INDEX
from projections.views.identity import MEMBERS

router = pages()


@router.get("/")
def home(p: PageDep) -> Response:
    if p.caller is None:
        return render(p, "signin.html", errors={})
    return render(p, "home.html")


@router.post("/signin")
async def sign_in(request: Request, p: PageDep) -> Response:
    form = await checked_form(request, p)
    token = text(form, "token")
    throttle: Throttle = request.app.state.auth_throttle  # the API's own count
    address = client_address(request)
    try:
        throttle.check(address)
    except TooManyFailures as e:
        why = Shown(e.problem, e.title, e.detail, "wait, then sign in again", "token", 429)
        return render(p, "signin.html", status=429, errors={"token": why})
    if not token or p.backend.views.get(MEMBERS, INDEX, hash_token(token)) is None:
        throttle.fail(address)
        return render(
            p,
            "signin.html",
            status=401,
            errors={
                "token": Shown(
                    "unauthenticated",
                    "A valid member token is required",
                    "that token is not (or no longer) valid",
                    "ask an owner for a new token (`admin add-member`)",
                    "token",
                    401,
                )
            },
        )
    sessions = store(request)
    sessions.drop(p.session.id)
    try:
        session = sessions.new(hash_token(token))  # a new id on sign-in: no session fixation
    except SessionsFull as e:
        why = Shown(e.problem, e.title, e.detail, "try again later", "token", e.status)
        return render(p, "signin.html", status=e.status, errors={"token": why})
    response = redirect("/")
    set_cookie(request, response, session)
    response.delete_cookie(CSRF_COOKIE, path="/")  # signed in: the session has its own
    return response


@router.post("/signout")
async def sign_out(request: Request, p: PageDep) -> Response:
    await checked_form(request, p)
    store(request).drop(p.session.id)
    response = redirect("/")
    response.delete_cookie(COOKIE, path="/")
    return response
