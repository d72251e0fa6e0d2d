"""Organizations and their members (A1, A3): tokens are shown once and stored as hashes."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import uuid4

from application.conflicts import retry_on_conflict
from application.log import TensorantLog
from application.ports import Clock
from domain.base import SYSTEM
from domain.connection import Connection
from domain.organization import MAX_TOKEN_DAYS, InvalidOrganization, Organization
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
