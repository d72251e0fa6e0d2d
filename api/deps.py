"""FastAPI dependencies: the backend built in the lifespan, the caller, and role checks."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Protocol

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from adapters.logstore import LogStore
from api.problems import Unauthenticated, ViewsBehind
from application.organizations import hash_token
from application.ports import Clock
from application.services import Services
from domain.access import require
from projections.store.base import INDEX, ViewStore
from projections.views.identity import MEMBERS


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


def get_container(request: Request) -> Backend:
    container: Backend = request.app.state.container
    return container


ContainerDep = Annotated[Backend, Depends(get_container)]


def get_services(container: ContainerDep) -> Services:
    return container.services


def get_views(container: ContainerDep) -> ViewStore:
    return container.views


AppDep = Annotated[Services, Depends(get_services)]
ViewsDep = Annotated[ViewStore, Depends(get_views)]

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


def get_caller(
    container: ContainerDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Caller:
    if credentials is None or not credentials.credentials:
        raise Unauthenticated("send Authorization: Bearer <token>")
    doc = container.views.get(MEMBERS, INDEX, hash_token(credentials.credentials))
    if doc is None:
        raise Unauthenticated("the bearer token is not valid")
    return Caller(
        str(doc["user_id"]), str(doc["email"]), str(doc["organization_id"]), str(doc["role"])
    )


CallerDep = Annotated[Caller, Depends(get_caller)]


def allowed(permission: str) -> Callable[[Caller], Caller]:
    """A dependency that refuses (403) callers whose role lacks `permission` (A2)."""

    def check(caller: CallerDep) -> Caller:
        require(caller.role, permission)
        return caller

    check.__name__ = f"require_{permission}"
    return check


Reader = Annotated[Caller, Depends(allowed("read"))]
Owner = Annotated[Caller, Depends(allowed("manage_connections"))]
VolumeDiscoverer = Annotated[Caller, Depends(allowed("discover_volumes"))]
ProjectManager = Annotated[Caller, Depends(allowed("manage_projects"))]


def settle(container: Backend, position: int) -> None:
    """Read-your-writes: the views reflect the command before the response is built."""
    if not container.wait_for(position):
        raise ViewsBehind(
            "the change was recorded; the views are catching up — retry the GET shortly"
        )
