"""Organizations, their members and roles (A1), and whether they bring own connections (A3)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from domain.access import OWNER, ROLES
from domain.base import TensorantAggregate, topic
from domain.errors import Conflict, DomainError, NotFound

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
    invites: dict[str, dict[str, Any]]  # open invite links (A1), by invite id

    @classmethod
    def create(cls, name: str, mode: str, actor: str, at: datetime) -> Organization:
        name = name.strip()
        if not name:
            raise InvalidOrganization("an organization needs a name")
        if mode not in MODES:
            raise InvalidOrganization(f"mode must be one of {', '.join(MODES)}")
        return cls._create(OrganizationCreated, actor=actor, timestamp=at, name=name, mode=mode)

    def add_member(
        self,
        user_id: str,
        email: str,
        role: str,
        token_hash: str,
        actor: str,
        at: datetime,
        token_expires_at: datetime | None = None,
    ) -> None:
        _check_role(role)
        email = email.strip()
        if "@" not in email or len(email) > 254:
            raise InvalidOrganization("a member needs an email address")
        # Case-insensitively: Ana@Example.com and ana@example.com are one person's mailbox.
        if any(m["email"].casefold() == email.casefold() for m in self.members.values()):
            raise MemberExists(f"{email} is already a member")
        _check_expiry(token_expires_at, at)
        self._trigger(
            MemberAdded,
            actor,
            at,
            user_id=user_id,
            email=email,
            role=role,
            token_hash=token_hash,
            token_expires_at=token_expires_at,
        )

    def member(self, user_id: str) -> dict[str, Any]:
        found = self.members.get(user_id)
        if found is None:
            raise NotFound("no such member in this organization")
        return found

    def _owners(self) -> int:
        return sum(1 for m in self.members.values() if m["role"] == OWNER)

    def remove_member(self, user_id: str, actor: str, at: datetime) -> None:
        """A1: the member's token stops working; the last owner cannot be removed."""
        found = self.member(user_id)
        if found["role"] == OWNER and self._owners() == 1:
            raise LastOwner("the last owner cannot be removed: make another member owner first")
        self._trigger(
            MemberRemoved,
            actor,
            at,
            user_id=user_id,
            email=found["email"],
            role=found["role"],
            token_hash=found["token_hash"],
        )

    def change_role(self, user_id: str, role: str, actor: str, at: datetime) -> None:
        _check_role(role)
        found = self.member(user_id)
        if found["role"] == role:
            return
        if found["role"] == OWNER and self._owners() == 1:
            raise LastOwner("the last owner cannot be demoted: make another member owner first")
        self._trigger(
            MemberRoleChanged,
            actor,
            at,
            user_id=user_id,
            email=found["email"],
            role=role,
            previous_role=found["role"],
        )

    def rotate_token(
        self,
        user_id: str,
        token_hash: str,
        actor: str,
        at: datetime,
        token_expires_at: datetime | None = None,
        *,
        may_lengthen: bool = False,
    ) -> None:
        """The old token stops working and the new one (shown once) replaces it.

        N3: the new token keeps the expiry the old one had (an owner's choice): asked for none,
        it gets that one; asked for another, the earlier of the two, unless `may_lengthen` (the
        operator's CLI; owners change an expiry with `set_token_expiry`)."""
        found = self.member(user_id)
        current: datetime | None = found.get("token_expires_at")
        if token_expires_at is None:
            token_expires_at = current
        else:
            _check_expiry(token_expires_at, at)
            if current is not None and not may_lengthen:
                token_expires_at = min(token_expires_at, current)
        self._trigger(
            MemberTokenRotated,
            actor,
            at,
            user_id=user_id,
            email=found["email"],
            token_hash=token_hash,
            previous_token_hash=found["token_hash"],
            token_expires_at=token_expires_at,
        )

    def set_token_expiry(
        self, user_id: str, token_expires_at: datetime | None, actor: str, at: datetime
    ) -> None:
        """N3: an owner sets, changes or lifts (None) a member's token expiry; the member's
        next request is checked against it, and rotating keeps it."""
        found = self.member(user_id)
        _check_expiry(token_expires_at, at)
        previous: datetime | None = found.get("token_expires_at")
        if previous == token_expires_at:
            return
        self._trigger(
            MemberTokenExpiryChanged,
            actor,
            at,
            user_id=user_id,
            email=found["email"],
            token_expires_at=token_expires_at,
            previous_token_expires_at=previous,
        )

    def _open_invites(self) -> dict[str, dict[str, Any]]:
        # Organizations created before invite links have no `invites` until their first invite.
        found: dict[str, dict[str, Any]] = self.__dict__.setdefault("invites", {})
        return found

    def create_invite(
        self,
        invite_id: str,
        email: str,
        role: str,
        token_hash: str,
        expires_at: datetime,
        actor: str,
        at: datetime,
    ) -> None:
        """A1: an owner invites someone by a single-use, expiring link; only its hash is kept."""
        _check_role(role)
        email = email.strip()
        if "@" not in email or len(email) > 254:
            raise InvalidOrganization("an invite needs an email address")
        if any(m["email"].casefold() == email.casefold() for m in self.members.values()):
            raise MemberExists(f"{email} is already a member")
        if not at < expires_at <= at + timedelta(days=MAX_INVITE_DAYS):
            raise InvalidOrganization(f"an invite expires within {MAX_INVITE_DAYS} days")
        self._trigger(
            InviteCreated,
            actor,
            at,
            invite_id=invite_id,
            email=email,
            role=role,
            token_hash=token_hash,
            expires_at=expires_at,
        )

    def open_invites(self) -> list[dict[str, Any]]:
        return [{"id": k, **v} for k, v in self._open_invites().items()]

    def revoke_invite(self, invite_id: str, actor: str, at: datetime) -> None:
        found = self._open_invites().get(invite_id)
        if found is None:
            raise NotFound("no such open invite in this organization")
        self._trigger(InviteRevoked, actor, at, invite_id=invite_id, email=found["email"])

    def invite_by_hash(self, token_hash: str, at: datetime) -> tuple[str, dict[str, Any]]:
        """The open invite a link stands for; a used, revoked, unknown or expired link is
        refused alike (InviteInvalid), so a link says nothing about why to whoever holds it."""
        for invite_id, found in self._open_invites().items():
            if found["token_hash"] == token_hash:
                if found["expires_at"] <= at:
                    raise InviteInvalid("this invite link has expired: ask an owner for a new one")
                return invite_id, found
        raise InviteInvalid(
            "this invite link is not (or no longer) valid: it was used, revoked or never existed"
        )

    def accept_invite(
        self, token_hash: str, user_id: str, member_token_hash: str, at: datetime
    ) -> str:
        """The invited person becomes a member with the invited role; the link is used up.
        Returns the invite id."""
        invite_id, found = self.invite_by_hash(token_hash, at)
        actor = f"invite:{invite_id}"
        self.add_member(user_id, found["email"], found["role"], member_token_hash, actor, at)
        self._trigger(
            InviteAccepted, actor, at, invite_id=invite_id, email=found["email"], user_id=user_id
        )
        return invite_id

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
        aggregate.invites = {}


@topic("tensorant.MemberAdded")
class MemberAdded(Organization.Event):
    user_id: str
    email: str
    role: str
    token_hash: str
    # Added with member management: events stored before it have none (no expiry).
    token_expires_at: datetime | None = None

    def apply(self, aggregate: Organization) -> None:
        aggregate.members[self.user_id] = {
            "email": self.email,
            "role": self.role,
            "token_hash": self.token_hash,
            "token_expires_at": getattr(self, "token_expires_at", None),
        }


@topic("tensorant.MemberRemoved")
class MemberRemoved(Organization.Event):
    user_id: str
    email: str
    role: str
    token_hash: str  # the token that stops working (never shown by the audit API)

    def apply(self, aggregate: Organization) -> None:
        aggregate.members.pop(self.user_id, None)


@topic("tensorant.MemberRoleChanged")
class MemberRoleChanged(Organization.Event):
    user_id: str
    email: str
    role: str
    previous_role: str

    def apply(self, aggregate: Organization) -> None:
        aggregate.members[self.user_id]["role"] = self.role


@topic("tensorant.MemberTokenRotated")
class MemberTokenRotated(Organization.Event):
    user_id: str
    email: str
    token_hash: str
    previous_token_hash: str  # the token that stops working
    token_expires_at: datetime | None

    def apply(self, aggregate: Organization) -> None:
        member = aggregate.members[self.user_id]
        member["token_hash"] = self.token_hash
        member["token_expires_at"] = self.token_expires_at


@topic("tensorant.MemberTokenExpiryChanged")
class MemberTokenExpiryChanged(Organization.Event):
    """An owner set, changed or lifted (None) a member's token expiry (N3)."""

    user_id: str
    email: str
    token_expires_at: datetime | None
    previous_token_expires_at: datetime | None

    def apply(self, aggregate: Organization) -> None:
        aggregate.members[self.user_id]["token_expires_at"] = self.token_expires_at


@topic("tensorant.InviteCreated")
class InviteCreated(Organization.Event):
    """An owner invited someone (A1); the link's secret is stored only as its hash."""

    invite_id: str
    email: str
    role: str
    token_hash: str
    expires_at: datetime

    def apply(self, aggregate: Organization) -> None:
        aggregate._open_invites()[self.invite_id] = {
            "email": self.email,
            "role": self.role,
            "token_hash": self.token_hash,
            "expires_at": self.expires_at,
            "created_at": self.timestamp,
        }


@topic("tensorant.InviteRevoked")
class InviteRevoked(Organization.Event):
    invite_id: str
    email: str

    def apply(self, aggregate: Organization) -> None:
        aggregate._open_invites().pop(self.invite_id, None)


@topic("tensorant.InviteAccepted")
class InviteAccepted(Organization.Event):
    """The invited person accepted (after their MemberAdded): the link no longer works."""

    invite_id: str
    email: str
    user_id: str

    def apply(self, aggregate: Organization) -> None:
        aggregate._open_invites().pop(self.invite_id, None)


MAX_TOKEN_DAYS = 3650
MAX_INVITE_DAYS = 30


def _check_role(role: str) -> None:
    if role not in ROLES:
        raise InvalidOrganization(f"role must be one of {', '.join(ROLES)}")


def _check_expiry(expires_at: datetime | None, at: datetime) -> None:
    if expires_at is not None and not at < expires_at <= at + timedelta(days=MAX_TOKEN_DAYS):
        raise InvalidOrganization(f"a token expires within {MAX_TOKEN_DAYS} days from now")


def organization_id_of(value: str) -> UUID:
    try:
        return UUID(value)
    except ValueError as e:
        raise InvalidOrganization(f"not an organization id: {value!r}") from e


class InvalidOrganization(DomainError):
    problem = "invalid-organization"


class MemberExists(Conflict):
    problem = "member-exists"


class InviteInvalid(DomainError):
    problem = "invite-invalid"
    status = 410
    title = "This invite link no longer works"


class LastOwner(Conflict):
    problem = "last-owner"
    title = "An organization keeps at least one owner"


class ProvidedByTensorant(Conflict):
    problem = "provided-by-tensorant"
    title = "Connections are provided by Tensorant"
