"""Who is who: members by token hash (the only way a bearer token is resolved) and
organizations (A1). Documents hold exactly what the API returns (JSON-ready)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from domain.organization import MemberAdded, OrganizationCreated
from domain.times import iso
from projections.store.base import INDEX, DocKey, ViewBatch
from projections.store.engine import topics_of

MEMBERS = "members"
ORGANIZATIONS = "organizations"


class MembersView:
    """Token hash -> member (the only way a bearer token is resolved)."""

    name = MEMBERS
    topics = topics_of(MemberAdded)

    def keys(self, event: Any) -> Iterable[DocKey]:
        return [(INDEX, event.token_hash)]

    def apply(self, batch: ViewBatch, event: Any, position: int) -> None:
        if isinstance(event, MemberAdded):
            batch.put(
                INDEX,
                event.token_hash,
                {
                    "user_id": event.user_id,
                    "email": event.email,
                    "organization_id": str(event.originator_id),
                    "role": event.role,
                },
            )


class OrganizationsView:
    """One document per organization: its name and mode."""

    name = ORGANIZATIONS
    topics = topics_of(OrganizationCreated)

    def apply(self, batch: ViewBatch, event: Any, position: int) -> None:
        if isinstance(event, OrganizationCreated):
            org_id = str(event.originator_id)
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
