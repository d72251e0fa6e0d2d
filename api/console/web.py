"""What every console page shares: the session and its caller, CSRF and Origin checks, and
rendering with the security headers (a CSP without inline scripts)."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar, cast
from urllib.parse import urlsplit

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.routing import APIRoute
from fastapi.templating import Jinja2Templates

from api.console.problems import shown
from api.console.sessions import COOKIE, CSRF_COOKIE, Session, SessionStore
from api.deps import GUESSES, Backend, Caller, member_now, read_guessed, reading
from domain.access import PERMISSIONS, require
from domain.errors import TensorantError
from projections.store.base import Doc
from projections.views.identity import ORGANIZATIONS, member_and_roster, member_and_roster_later

T = TypeVar("T")
TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
# The templates ship with the code: no stat of each template file on every render (profiled
# under wrk, bench/api_load.py).
TEMPLATES.env.auto_reload = False
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "object-src 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class SignedOut(Exception):
    """No session with a valid member token: the page sends the visitor to sign in."""


class Refused(Exception):
    """A form post without this session's CSRF token or from another origin (403)."""


def store(request: Request) -> SessionStore:
    sessions: SessionStore = request.app.state.console_sessions
    return sessions


def backend_of(request: Request) -> Backend:
    backend: Backend = request.app.state.container
    return backend


@dataclass
class Page:
    """One request's console context."""

    request: Request
    session: Session
    caller: Caller | None
    new_cookie: bool = False
    flash: list[str] = field(default_factory=list)
    # The organization's document, when it was asked for ahead (`read_signed_in`).
    org_doc: Callable[[], Doc | None] | None = None

    def organization(self) -> Doc | None:
        """The caller's organization document (its name), None when signed out."""
        if self.caller is None:
            return None
        if self.org_doc is not None:
            return self.org_doc()
        return self.backend.views.get(ORGANIZATIONS, self.caller.org_id, "organization")

    @property
    def backend(self) -> Backend:
        return backend_of(self.request)

    @property
    def me(self) -> Caller:
        if self.caller is None:
            raise SignedOut
        return self.caller

    def can(self, permission: str) -> bool:
        return self.caller is not None and self.caller.role in PERMISSIONS[permission]

    def require(self, permission: str) -> Caller:
        """The same rule the API's dependencies apply (domain.access.require): 403 otherwise."""
        require(self.me.role, permission)
        return self.me


def caller_of(backend: Backend, session: Session | None) -> Caller | None:
    """The session's member as the API resolves a bearer token: the members index, then the
    roster (current role; a removed member or an expired token signs the session out)."""
    if session is None or session.token_hash is None:
        return None
    return _member_now(backend, *member_and_roster(backend.views, session.token_hash))


def _member_now(backend: Backend, member: Doc | None, roster: Doc | None) -> Caller | None:
    if member is None:
        return None
    found = member_now(backend, member, roster)
    return found if isinstance(found, Caller) else None


def page(request: Request) -> Page:
    """The signed-in session and its caller; else a signed-out visitor's page session, which
    nothing on the server keeps (its CSRF token is a signed cookie, N4)."""
    sessions = store(request)
    session = sessions.get(request.cookies.get(COOKIE))
    caller = None if session is None else caller_of(backend_of(request), session)
    if session is None or caller is None:
        if session is not None:  # a removed member's or a replaced token's: kept no longer
            sessions.drop(session.id)
        visitor, fresh = sessions.signed_out(request.cookies.get(CSRF_COOKIE))
        return Page(request, visitor, None, new_cookie=fresh)
    return Page(request, session, caller)


def signed_in_page(request: Request) -> Page:
    """`page`, refused when signed out."""
    p = page(request)
    if p.caller is None:
        raise SignedOut
    return p


async def signed_in(request: Request) -> Page:
    """`page` (read as the API's routes read: `api.deps.reading`), refused when signed out."""
    return await reading(backend_of(request).views, signed_in_page, request)


async def read_signed_in(request: Request, read: Callable[[Page], T]) -> T:
    """`signed_in`, then `read` the page, in one `reading` (one threadpool hand-off on
    PostgreSQL instead of two) and on one connection, as `api.deps.read_as` reads: on a
    session whose member this process has seen, the page is read as that member (and their
    organization's document asked for ahead) while the session's check is held back and sent
    with the first read; the page is answered only once the check names the same member."""
    backend = backend_of(request)

    def on_one_connection() -> T:
        with backend.views.one_connection():
            return _read_page(request, backend, read)

    return await reading(backend.views, on_one_connection)


def _read_page(request: Request, backend: Backend, read: Callable[[Page], T]) -> T:
    session = store(request).get(request.cookies.get(COOKIE))
    if session is None or session.token_hash is None:
        raise SignedOut
    token_hash = session.token_hash
    answer = member_and_roster_later(backend.views, token_hash)
    guess = GUESSES.get(token_hash)

    def read_as_guess(member: Caller) -> T:
        org = backend.views.get_later(ORGANIZATIONS, member.org_id, "organization")
        return read(Page(request, session, member, org_doc=org))

    caller, hit, page = read_guessed(guess, read_as_guess, lambda: _member_now(backend, *answer()))
    if hit:
        return cast(T, page)
    if caller is None:
        GUESSES.discard(token_hash)
        raise SignedOut
    GUESSES.put(token_hash, caller)
    return read(Page(request, session, caller))


def set_cookie(request: Request, response: Response, session: Session) -> None:
    """The session's cookie; a signed-out visitor's is the signed CSRF token (N4)."""
    signed_in = bool(session.id)
    response.set_cookie(
        COOKIE if signed_in else CSRF_COOKIE,
        session.id if signed_in else session.csrf,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
        path="/",
    )


def _same_origin(request: Request) -> bool:
    here = f"{request.url.scheme}://{request.url.netloc}"
    origin = request.headers.get("origin")
    if origin is None:
        referer = request.headers.get("referer")
        if referer is None:
            return False
        parts = urlsplit(referer)
        origin = f"{parts.scheme}://{parts.netloc}"
    return hmac.compare_digest(origin, here)


async def checked_form(request: Request, p: Page) -> dict[str, Any]:
    """A form post must come from this origin and carry this session's CSRF token."""
    if not _same_origin(request):
        raise Refused("the form was posted from another origin")
    form = await request.form()
    sent = form.get("csrf_token")
    if not isinstance(sent, str) or not hmac.compare_digest(sent, p.session.csrf):
        raise Refused("the form did not carry this session's CSRF token; reload the page")
    if not p.session.id and (p.new_cookie or not store(request).valid_csrf(sent)):
        # Signed out: the form's token must be the signed cookie the browser sent with it.
        raise Refused("the form did not carry this session's CSRF token; reload the page")
    return {k: v for k, v in form.multi_items()}


def render(p: Page, template: str, status: int = 200, **context: Any) -> HTMLResponse:
    return render_with(p, template, status, p.organization(), context)


def render_with(
    p: Page, template: str, status: int, org: Doc | None, context: dict[str, Any]
) -> HTMLResponse:
    response = TEMPLATES.TemplateResponse(
        p.request,
        template,
        {
            "caller": p.caller,
            "org": org,
            "csrf": p.session.csrf,
            "can": p.can,
            "path": p.request.url.path,
            **context,
        },
        status_code=status,
        headers=SECURITY_HEADERS,
    )
    if p.new_cookie:
        set_cookie(p.request, response, p.session)
    return response


def redirect(to: str) -> RedirectResponse:
    return RedirectResponse(to, status_code=303, headers={"Cache-Control": "no-store"})


class ConsoleRoute(APIRoute):
    """Console routes answer HTML: signed out → the sign-in page; a refusal (a role without the
    permission, a missing object, a bad CSRF token or origin) → an error page, never JSON."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                return await handler(request)
            except SignedOut:
                if request.method == "GET":
                    return redirect("/")
                return render(page(request), "signin.html", status=401, errors={})
            except Refused as exc:
                return render(page(request), "error.html", status=403, message=str(exc))
            except TensorantError as exc:
                s = shown(exc)
                return render(page(request), "error.html", status=s.status, problem=s)

        return guarded


def pages() -> APIRouter:
    """A page module's router: HTML routes (`ConsoleRoute`), not in the API document."""
    return APIRouter(include_in_schema=False, route_class=ConsoleRoute)


PageDep = Annotated[Page, Depends(page)]
SignedIn = Annotated[Page, Depends(signed_in)]
