"""Who is who: members by token hash (the only way a bearer token is resolved) and
organizations (A1). Documents hold exactly what the API returns (JSON-ready)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from domain.ids import id_text
from domain.organization import (
    MemberAdded,
    MemberRemoved,
    MemberRoleChanged,
    MemberTokenExpiryChanged,
    MemberTokenRotated,
    OrganizationCreated,
)
from domain.times import iso
from projections.store.base import INDEX, Doc, DocKey, Follow, ViewBatch, ViewStore
from projections.store.engine import topics_of

MEMBERS = "members"
ROSTER = "roster"
ORGANIZATIONS = "organizations"


def roster_key(user_id: str) -> str:
    return f"member:{user_id}"


# A members-index document names its member's roster document (organization, `roster_key`).
MEMBER_ROSTER = Follow(
    ROSTER, org_field="organization_id", key_field="user_id", key_prefix=roster_key("")
)


def member_and_roster(views: ViewStore, token_hash: str) -> tuple[Doc | None, Doc | None]:
    """The members-index document of a token hash and its member's roster document (their role
    and expiry now), in one read where the store can (one round trip on PostgreSQL)."""
    return views.get_followed(MEMBERS, INDEX, token_hash, MEMBER_ROSTER)


def member_and_roster_later(
    views: ViewStore, token_hash: str
) -> Callable[[], tuple[Doc | None, Doc | None]]:
    """`member_and_roster`, answered when called: inside `ViewStore.one_connection` the query
    goes out now and its answer comes back with the next read's (PostgreSQL)."""
    return views.get_followed_later(MEMBERS, INDEX, token_hash, MEMBER_ROSTER)


class MembersView:
    """Token hash -> member (the only way a bearer token is resolved).

    A removed member's and a replaced token's hash are deleted; the member's current role and
    expiry are read from the roster (`RosterView`), so a role change needs no hash.
    """

    name = MEMBERS
    rebuild_weight = 2.6  # see `AuditView.rebuild_weight`
    topics = topics_of(MemberAdded, MemberRemoved, MemberTokenRotated)

    def keys(self, event: Any) -> Iterable[DocKey]:
        keys = [(INDEX, event.token_hash)]
        if isinstance(event, MemberTokenRotated):
            keys.append((INDEX, event.previous_token_hash))
        return keys

    def apply(self, batch: ViewBatch, event: Any, position: int) -> None:
        if isinstance(event, MemberRemoved):
            batch.delete(INDEX, event.token_hash)
        elif isinstance(event, MemberTokenRotated):
            old = batch.get(INDEX, event.previous_token_hash)
            batch.delete(INDEX, event.previous_token_hash)
            if old is not None:
                batch.put(INDEX, event.token_hash, old)
        elif isinstance(event, MemberAdded):
            batch.put(
                INDEX,
                event.token_hash,
                {
                    "user_id": event.user_id,
                    "email": event.email,
                    "organization_id": id_text(event.originator_id),
                    "role": event.role,
                },
            )


class OrganizationsView:
    """One document per organization: its name and mode."""

    name = ORGANIZATIONS
    rebuild_weight = 0.7  # see `AuditView.rebuild_weight`
    topics = topics_of(OrganizationCreated)

    def apply(self, batch: ViewBatch, event: Any, position: int) -> None:
        if isinstance(event, OrganizationCreated):
            org_id = id_text(event.originator_id)
            batch.put(
                org_id,
                "organization",
                {
                    "id": org_id,
                    "name": event.name,
                    "mode": event.mode,
                    "created_at": iso(event.timestamp),
                },
            )


class RosterView:
    """Per organization, `member:<user_id>` -> what `GET /v1/members` shows (never a token or
    its hash); also the current role and token expiry every authentication reads."""

    name = ROSTER
    rebuild_weight = 2.9  # see `AuditView.rebuild_weight`
    topics = topics_of(
        MemberAdded,
        MemberRemoved,
        MemberRoleChanged,
        MemberTokenRotated,
        MemberTokenExpiryChanged,
    )

    def keys(self, event: Any) -> Iterable[DocKey]:
        return [(id_text(event.originator_id), roster_key(event.user_id))]

    def apply(self, batch: ViewBatch, event: Any, position: int) -> None:
        org_id = id_text(event.originator_id)
        key = roster_key(event.user_id)
        if isinstance(event, MemberAdded):
            expires = getattr(event, "token_expires_at", None)
            batch.put(
                org_id,
                key,
                {
                    "user_id": event.user_id,
                    "email": event.email,
                    "role": event.role,
                    "created_at": iso(event.timestamp),
                    "token_expires_at": None if expires is None else iso(expires),
                    "token_rotated_at": None,
                },
            )
            return
        if isinstance(event, MemberRemoved):
            batch.delete(org_id, key)
            return
        doc = batch.get(org_id, key)
        if doc is None:
            return
        doc = dict(doc)
        if isinstance(event, MemberRoleChanged):
            doc["role"] = event.role
        elif isinstance(event, MemberTokenRotated):
            expires = event.token_expires_at
            doc["token_expires_at"] = None if expires is None else iso(expires)
            doc["token_rotated_at"] = iso(event.timestamp)
        elif isinstance(event, MemberTokenExpiryChanged):
            expires = event.token_expires_at
            doc["token_expires_at"] = None if expires is None else iso(expires)
        batch.put(org_id, key, doc)
