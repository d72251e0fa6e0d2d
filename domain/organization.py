"""Organizations, their members and roles (A1), and whether they bring own connections (A3)."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from domain.access import ROLES
from domain.base import TensorantAggregate, topic
from domain.errors import Conflict, DomainError

MODES = ("own", "provided")


class Organization(TensorantAggregate):
    TOPIC = "tensorant.Organization"

    class Event(TensorantAggregate.Event):
        TOPIC = "tensorant.Organization.Event"

    class Created(Event, TensorantAggregate.Created):
        TOPIC = "tensorant.Organization.Created"

    def __init__(self) -> None:
        """State is set by the created event's apply(); annotations below only document it."""

    name: str
    mode: str
    members: dict[str, dict[str, Any]]

    @classmethod
    def create(cls, name: str, mode: str, actor: str, at: datetime) -> Organization:
        name = name.strip()
        if not name:
            raise InvalidOrganization("an organization needs a name")
        if mode not in MODES:
            raise InvalidOrganization(f"mode must be one of {', '.join(MODES)}")
        return cls._create(OrganizationCreated, actor=actor, timestamp=at, name=name, mode=mode)

    def add_member(
        self, user_id: str, email: str, role: str, token_hash: str, actor: str, at: datetime
    ) -> None:
        if role not in ROLES:
            raise InvalidOrganization(f"role must be one of {', '.join(ROLES)}")
        if "@" not in email:
            raise InvalidOrganization("a member needs an email address")
        if any(m["email"] == email for m in self.members.values()):
            raise MemberExists(f"{email} is already a member")
        self._trigger(
            MemberAdded, actor, at, user_id=user_id, email=email, role=role, token_hash=token_hash
        )

    def ensure_may_bring_own_connections(self) -> None:
        """A3: a `provided` organization uses Tensorant's connections, not its own."""
        if self.mode == "provided":
            raise ProvidedByTensorant(
                "this organization's connections are provided by Tensorant; "
                "contact your platform administrator about using your own connections"
            )

    @property
    def org_id(self) -> str:
        return str(self.id)


@topic("tensorant.OrganizationCreated")
class OrganizationCreated(Organization.Created):
    name: str
    mode: str

    def apply(self, aggregate: Organization) -> None:
        aggregate.name = self.name
        aggregate.mode = self.mode
        aggregate.members = {}


@topic("tensorant.MemberAdded")
class MemberAdded(Organization.Event):
    user_id: str
    email: str
    role: str
    token_hash: str

    def apply(self, aggregate: Organization) -> None:
        aggregate.members[self.user_id] = {
            "email": self.email,
            "role": self.role,
            "token_hash": self.token_hash,
        }


def organization_id_of(value: str) -> UUID:
    try:
        return UUID(value)
    except ValueError as e:
        raise InvalidOrganization(f"not an organization id: {value!r}") from e


class InvalidOrganization(DomainError):
    problem = "invalid-organization"


class MemberExists(Conflict):
    problem = "member-exists"


class ProvidedByTensorant(Conflict):
    problem = "provided-by-tensorant"
    title = "Connections are provided by Tensorant"
