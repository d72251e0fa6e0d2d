"""FastAPI dependencies: the backend built in the lifespan, the caller and its role, one
dependency per service area, the views, and read-your-writes."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Protocol, TypeVar, cast

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from adapters.logstore import LogStore
from api.client_address import client_address
from api.problems import Unauthenticated, ViewsBehind
from api.throttle import Throttle
from application.organizations import hash_token
from application.ports import Clock
from application.projects import ProjectService
from application.services import Services
from application.trainer_callbacks import TrainerCallbacks
from domain.access import PERMISSIONS, require
from domain.times import parse_iso
from projections.store.base import Doc, ViewStore
from projections.store.lru import Lru
from projections.views.identity import member_and_roster, member_and_roster_later


class Backend(Protocol):
    """What the API is given by the composition root (`entrypoints.bootstrap.Container`)."""

    services: Services
    views: ViewStore
    logs: LogStore
    clock: Clock

    @property
    def balance_warning_days(self) -> float: ...

    def wait_for(self, position: int) -> bool:
        """Read-your-writes: True once every view has applied `position` (bounded wait)."""
        ...

    def start(self, *, projectors: bool, reactions: bool) -> None:
        """Start what runs beside the API in this process (projectors; embedded reactions)."""
        ...

    def stop_projectors(self) -> None: ...

    def close(self) -> None: ...


# Dependencies that only pick objects (no I/O) are `async def`: FastAPI runs a plain `def`
# dependency in the threadpool, and under load those hand-offs cost more than the requests' own
# work (bench/api_load.py, profiled with py-spy). `get_caller` reads the view store: `reading`.
async def get_backend(request: Request) -> Backend:
    backend: Backend = request.app.state.container
    return backend


BackendDep = Annotated[Backend, Depends(get_backend)]

# ---------------------------------------------------------------- the caller (A1, A2, A4)
_bearer = HTTPBearer(auto_error=False, description="The token `admin add-member` printed.")


@dataclass(frozen=True)
class Caller:
    """The authenticated member: every query and command is scoped to `org_id` (A4)."""

    user_id: str
    email: str
    org_id: str
    role: str

    @property
    def actor(self) -> str:
        return f"user:{self.user_id}"


R = TypeVar("R")
G = TypeVar("G")  # a guess of who the caller is (`read_guessed`)
K = TypeVar("K")  # who the check says they are (None: nobody, for a signed-out session)


async def reading(views: ViewStore, read: Callable[..., R], *args: Any) -> R:
    """Run `read` (view reads, then building the answer) as the view store reads for a
    coroutine (`ViewStore.read_async`): on the event loop when its reads are local (embedded
    SQLite: microseconds, less than the threadpool hand-off FastAPI gives a plain `def`,
    profiled under wrk in bench/api_load.py); on PostgreSQL on the loop too, each round trip
    awaited there; else in the threadpool. The loop never blocks on a network round trip, so
    `read` must only read the stores (never call RunPod or the object store)."""
    return await views.read_async(read, *args)


async def get_caller(
    request: Request,
    backend: BackendDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Caller:
    if credentials is None or not credentials.credentials:
        raise Unauthenticated("send Authorization: Bearer <token>")
    return await reading(backend.views, resolve_caller, request, backend, credentials.credentials)


def _throttled(request: Request) -> tuple[Throttle, str]:
    """An address that keeps sending bad tokens is slowed (429) before any lookup."""
    throttle: Throttle = request.app.state.auth_throttle
    address = client_address(request)
    throttle.check(address)
    return throttle, address


def resolve_caller(request: Request, backend: Backend, token: str) -> Caller:
    """The member a bearer token belongs to, as they are now (A1, A4)."""
    throttle, address = _throttled(request)
    member, roster = member_and_roster(backend.views, hash_token(token))
    return _checked(backend, throttle, address, member, roster)


def _checked(
    backend: Backend, throttle: Throttle, address: str, member: Doc | None, roster: Doc | None
) -> Caller:
    """The caller the members index and roster documents of a token name, or 401."""
    if member is None:
        throttle.fail(address)
        raise Unauthenticated("the bearer token is not valid")
    found = member_now(backend, member, roster)
    if isinstance(found, str):
        raise Unauthenticated(found)
    return found


def member_now(backend: Backend, member: Doc, roster: Doc | None) -> Caller | str:
    """The member a members-index document names, as their roster document says they are now
    (`member_and_roster` reads both), or why their token no longer works. Read on every request,
    never cached: a removal, a role change or an expiry applies to the next request on every
    process (the API's bearer tokens and the console's sessions)."""
    if roster is None:
        return "the bearer token is not valid"
    expires = roster.get("token_expires_at")
    if expires is not None and parse_iso(str(expires)) <= backend.clock.now():
        return "the bearer token has expired: ask an owner for a new one"
    org_id = str(member["organization_id"])
    return Caller(str(member["user_id"]), str(roster["email"]), org_id, str(roster["role"]))


CallerDep = Annotated[Caller, Depends(get_caller)]


@dataclass(frozen=True)
class Bearer:
    """A bearer token sent and not yet resolved, and the permission the route needs: a GET route
    resolves it and reads in one go (`read_as`)."""

    request: Request
    token: str
    permission: str


def bearer(permission: str) -> Callable[..., Awaitable[Bearer]]:
    """A dependency that refuses a request without a token (401) and hands the route the token;
    `read_as` then resolves it and checks `permission` as `get_caller` and `allowed` do."""

    async def sent(
        request: Request,
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Bearer:
        if credentials is None or not credentials.credentials:
            raise Unauthenticated("send Authorization: Bearer <token>")
        return Bearer(request, credentials.credentials, permission)

    sent.__name__ = f"bearer_{permission}"
    return sent


# The caller each token hash last resolved to in this process. A guess is never an answer: it
# lets a request's reads be sent with its token's check, and what they read is returned only
# once that check names the same caller (`read_as`).
GUESSES: Lru[str, Caller] = Lru(10_000)


async def read_as(backend: Backend, sent: Bearer, read: Callable[[Caller], R]) -> R:
    """Resolve the caller (`resolve_caller`), check their permission (`allowed`), then `read` as
    them, all in one `reading`: on PostgreSQL one threadpool hand-off per request instead of
    two (the auth dependency's, then the route's), profiled under wrk in bench/api_load.py.

    The reads share one connection (`ViewStore.one_connection`). When this process has seen
    the token before, the route reads as that caller while the token's check is in flight: on
    PostgreSQL the check and the first read travel in one round trip (a request on a known
    token costs one round trip fewer). The check is made on every request all the same: its
    answer decides (401, 403), and a read made as a caller who has since changed (role, email)
    is made again as who they are now, or dropped."""

    def as_caller() -> R:
        with backend.views.one_connection():
            return _read_checked(backend, sent, read)

    return await reading(backend.views, as_caller)


def read_guessed(
    guess: G | None, read: Callable[[G], R], check: Callable[[], K]
) -> tuple[K, bool, R | None]:
    """`read` as `guess` while the check that tells who the caller is (`check`, its answer
    held back to travel with the read) is in flight: (caller, True, what was read) when the
    check names the guess, else (caller, False, None): then read again as the caller. A read
    that failed as the right caller raises; as a wrong one, it is forgotten."""
    if guess is None:
        return check(), False, None
    try:
        result, failed = read(guess), None
    except Exception as e:
        result, failed = None, e
    caller = check()
    same = bool(caller == guess)
    if same and failed is not None:
        raise failed
    return caller, same, result if same else None


def _read_checked(backend: Backend, sent: Bearer, read: Callable[[Caller], R]) -> R:
    throttle, address = _throttled(sent.request)
    token_hash = hash_token(sent.token)
    answer = member_and_roster_later(backend.views, token_hash)

    def check() -> Caller:
        try:
            return _checked(backend, throttle, address, *answer())
        except Unauthenticated:
            GUESSES.discard(token_hash)  # a removed member's or a replaced token's
            raise

    guess = GUESSES.get(token_hash)
    if guess is not None and guess.role not in PERMISSIONS[sent.permission]:
        guess = None
    caller, hit, result = read_guessed(guess, read, check)
    if hit:
        return cast(R, result)
    GUESSES.put(token_hash, caller)
    require(caller.role, sent.permission)
    return read(caller)


def allowed(permission: str) -> Callable[[Caller], Awaitable[Caller]]:
    """A dependency that refuses (403) callers whose role lacks `permission` (A2)."""

    async def check(caller: CallerDep) -> Caller:
        require(caller.role, permission)
        return caller

    check.__name__ = f"require_{permission}"
    return check


Reader = Annotated[Caller, Depends(allowed("read"))]
ReaderToken = Annotated[Bearer, Depends(bearer("read"))]
Owner = Annotated[Caller, Depends(allowed("manage_connections"))]
MemberManager = Annotated[Caller, Depends(allowed("manage_members"))]
VolumeDiscoverer = Annotated[Caller, Depends(allowed("discover_volumes"))]
ProjectManager = Annotated[Caller, Depends(allowed("manage_projects"))]
RunManager = Annotated[Caller, Depends(allowed("manage_runs"))]
Finance = Annotated[Caller, Depends(allowed("billing"))]
Auditor = Annotated[Caller, Depends(allowed("audit"))]
WebhookOwner = Annotated[Caller, Depends(allowed("manage_webhooks"))]


# ---------------------------------------------------------------- services and the read side
T = TypeVar("T")


def _from_backend(pick: Callable[[Backend], T]) -> Callable[[Backend], Awaitable[T]]:
    """A dependency that hands a route one part of the backend."""

    async def dependency(backend: BackendDep) -> T:
        return pick(backend)

    return dependency


ProjectsDep = Annotated[ProjectService, Depends(_from_backend(lambda b: b.services.projects))]
TrainerDep = Annotated[TrainerCallbacks, Depends(_from_backend(lambda b: b.services.trainer))]
ViewsDep = Annotated[ViewStore, Depends(_from_backend(lambda b: b.views))]
LogsDep = Annotated[LogStore, Depends(_from_backend(lambda b: b.logs))]

Settle = Callable[[int], None]


def settler(backend: Backend) -> Settle:
    """Read-your-writes for `backend` (the API's routes and the console's pages share it)."""

    def settle(position: int) -> None:
        """Read-your-writes: the views reflect the command before the response is built."""
        if not backend.wait_for(position):
            raise ViewsBehind(
                "the change was recorded; the views are catching up — retry the GET shortly"
            )

    return settle


async def _settle(backend: BackendDep) -> Settle:
    return settler(backend)


SettleDep = Annotated[Settle, Depends(_settle)]
