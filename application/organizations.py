"""Organizations and their members (A1, A3): tokens are shown once and stored as hashes."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import uuid4

from application.conflicts import retry_on_conflict
from application.log import TensorantLog
from application.ports import Clock
from domain.base import SYSTEM
from domain.connection import Connection
from domain.errors import NotFound
from domain.organization import (
    MAX_INVITE_DAYS,
    MAX_TOKEN_DAYS,
    InvalidOrganization,
    InviteInvalid,
    Organization,
    organization_id_of,
)
from domain.storage import Storage


def hash_token(token: str) -> str:
    """What is stored of a bearer token, and how a presented one is looked up."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    """A 256-bit bearer token; only its hash is ever stored."""
    return "tnt_" + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class NewMember:
    user_id: str
    token: str  # shown once, stored only as its hash
    position: int = 0
    token_expires_at: datetime | None = None


INVITE_PREFIX = "tni_"


def new_invite_token(org_id: str) -> str:
    """An invite link's secret: the organization (to find its aggregate) and 256 random bits;
    only its hash is stored."""
    return f"{INVITE_PREFIX}{org_id}.{secrets.token_urlsafe(32)}"


def org_of_invite(token: str) -> str:
    """The organization an invite token names; anything malformed is refused like a used link."""
    head, dot, secret = token.removeprefix(INVITE_PREFIX).partition(".")
    try:
        if not (token.startswith(INVITE_PREFIX) and dot and secret):
            raise InvalidOrganization("malformed")
        return str(organization_id_of(head))
    except InvalidOrganization:
        raise InviteInvalid("this invite link is not (or no longer) valid") from None


@dataclass(frozen=True)
class NewInvite:
    invite_id: str
    token: str  # shown once (in the link), stored only as its hash
    expires_at: datetime
    position: int


@dataclass(frozen=True)
class OrganizationService:
    log: TensorantLog
    clock: Clock

    def create(self, name: str, mode: str = "own", actor: str = SYSTEM) -> str:
        """An organization, with its (empty) compute connection and storage; returns its id."""
        at = self.clock.now()
        org = Organization.create(name, mode, actor, at)
        org_id = str(org.id)
        self.log.save_all(org, Connection.open(org_id, actor, at), Storage.open(org_id, actor, at))
        return org_id

    def _expiry(self, at: datetime, days: int | None) -> datetime | None:
        if days is None:
            return None
        if not 1 <= days <= MAX_TOKEN_DAYS:
            raise InvalidOrganization(f"a token expires in 1 to {MAX_TOKEN_DAYS} days")
        return at + timedelta(days=days)

    @retry_on_conflict
    def add_member(
        self,
        org_id: str,
        email: str,
        role: str,
        actor: str = SYSTEM,
        expires_in_days: int | None = None,
    ) -> NewMember:
        org = self.log.organization(org_id)
        token = new_token()
        user_id = str(uuid4())
        at = self.clock.now()
        expires = self._expiry(at, expires_in_days)
        org.add_member(user_id, email, role, hash_token(token), actor, at, expires)
        position = self.log.save_all(org)
        return NewMember(user_id, token, position, expires)

    @retry_on_conflict
    def remove_member(self, org_id: str, user_id: str, actor: str = SYSTEM) -> int:
        """A1: the member's token is refused from the next request on, on every process."""
        org = self.log.organization(org_id)
        org.remove_member(user_id, actor, self.clock.now())
        return self.log.save_all(org)

    @retry_on_conflict
    def change_role(self, org_id: str, user_id: str, role: str, actor: str = SYSTEM) -> int:
        org = self.log.organization(org_id)
        org.change_role(user_id, role, actor, self.clock.now())
        return self.log.save_all(org)

    @retry_on_conflict
    def rotate_token(
        self,
        org_id: str,
        user_id: str,
        actor: str = SYSTEM,
        expires_in_days: int | None = None,
        *,
        may_lengthen: bool = False,
    ) -> NewMember:
        """A new token for the member (shown once); the old one stops working. It keeps the
        old one's expiry, or an earlier one (`may_lengthen`: any, the operator's CLI)."""
        org = self.log.organization(org_id)
        token = new_token()
        at = self.clock.now()
        expires = self._expiry(at, expires_in_days)
        org.rotate_token(user_id, hash_token(token), actor, at, expires, may_lengthen=may_lengthen)
        position = self.log.save_all(org)
        kept: datetime | None = org.members[user_id]["token_expires_at"]
        return NewMember(user_id, token, position, kept)

    @retry_on_conflict
    def set_token_expiry(
        self, org_id: str, user_id: str, expires_in_days: int | None, actor: str = SYSTEM
    ) -> tuple[datetime | None, int]:
        """An owner's choice of a member's token expiry (None: never); (the expiry, position)."""
        org = self.log.organization(org_id)
        at = self.clock.now()
        expires = self._expiry(at, expires_in_days)
        org.set_token_expiry(user_id, expires, actor, at)
        return expires, self.log.save_all(org) if org.pending_events else 0

    @retry_on_conflict
    def create_invite(
        self, org_id: str, email: str, role: str, actor: str, expires_in_days: int = 7
    ) -> NewInvite:
        """A1: a single-use link that makes its holder a member with `role`."""
        if not 1 <= expires_in_days <= MAX_INVITE_DAYS:
            raise InvalidOrganization(f"an invite expires in 1 to {MAX_INVITE_DAYS} days")
        org = self.log.organization(org_id)
        token = new_invite_token(org_id)
        invite_id = str(uuid4())
        at = self.clock.now()
        expires = at + timedelta(days=expires_in_days)
        org.create_invite(invite_id, email, role, hash_token(token), expires, actor, at)
        return NewInvite(invite_id, token, expires, self.log.save_all(org))

    @retry_on_conflict
    def revoke_invite(self, org_id: str, invite_id: str, actor: str) -> int:
        org = self.log.organization(org_id)
        org.revoke_invite(invite_id, actor, self.clock.now())
        return self.log.save_all(org)

    def check_invite(self, token: str) -> dict[str, Any]:
        """The open invite a link stands for (email, role, expiry); InviteInvalid otherwise."""
        org = self._invite_org(token)
        _, found = org.invite_by_hash(hash_token(token), self.clock.now())
        return {
            "email": found["email"],
            "role": found["role"],
            "expires_at": found["expires_at"],
            "organization": org.name,
        }

    def _invite_org(self, token: str) -> Organization:
        try:
            return self.log.organization(org_of_invite(token))
        except NotFound:
            raise InviteInvalid("this invite link is not (or no longer) valid") from None

    @retry_on_conflict
    def accept_invite(self, token: str) -> tuple[str, NewMember]:
        """The link's holder becomes a member (their token shown once); the link is used up,
        even when two tabs accept at once (the aggregate's version decides)."""
        org = self._invite_org(token)
        member_token = new_token()
        user_id = str(uuid4())
        org.accept_invite(hash_token(token), user_id, hash_token(member_token), self.clock.now())
        position = self.log.save_all(org)
        return str(org.id), NewMember(user_id, member_token, position)

    def open_invites(self, org_id: str) -> list[dict[str, Any]]:
        """The organization's invites not yet used, revoked or expired, oldest first."""
        now = self.clock.now()
        found = [i for i in self.log.organization(org_id).open_invites() if i["expires_at"] > now]
        return sorted(found, key=lambda i: (i["created_at"], i["email"]))
