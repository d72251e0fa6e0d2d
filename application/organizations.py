"""Organizations and their members (A1, A3): tokens are shown once and stored as hashes."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from uuid import uuid4

from application.conflicts import retry_on_conflict
from application.log import TensorantLog
from application.ports import Clock
from domain.base import SYSTEM
from domain.connection import Connection
from domain.organization import Organization
from domain.storage import Storage


def hash_token(token: str) -> str:
    """What is stored of a bearer token, and how a presented one is looked up."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class NewMember:
    user_id: str
    token: str  # shown once, stored only as its hash


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

    @retry_on_conflict
    def add_member(self, org_id: str, email: str, role: str, actor: str = SYSTEM) -> NewMember:
        org = self.log.organization(org_id)
        token = "tnt_" + secrets.token_urlsafe(32)
        user_id = str(uuid4())
        org.add_member(user_id, email, role, hash_token(token), actor, self.clock.now())
        self.log.save_all(org)
        return NewMember(user_id=user_id, token=token)
