"""The API's read models: members (auth), organizations, connection cards, projects and datasets.

Documents hold exactly what the API returns (JSON-ready); money stays a decimal string.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from domain.connection import (
    AccountRefreshed,
    ConnectionCreated,
    ConnectionSaved,
    Disconnected,
    KeyRotated,
    WritePermissionProven,
)
from domain.organization import MemberAdded, OrganizationCreated
from domain.project import DatasetVersionRegistered, ProjectCreated
from domain.rates import network_volume_per_month
from domain.storage import (
    CUSTOM_S3,
    RUNPOD_VOLUME,
    CustomS3Bound,
    Storage,
    StorageCreated,
    StorageCredentialsRotated,
    StorageLocked,
    VolumeBound,
    VolumeResized,
)
from projections.audit import AuditView
from projections.billing import BillingView
from projections.orphans_view import OrphansView
from projections.runs_view import RunsView
from projections.view import Doc, DocKey, ViewBatch

# Views keyed by something other than an organization use this org_id.
GLOBAL = "_"

MEMBERS = "members"
ORGANIZATIONS = "organizations"
CONNECTIONS = "connections"
PROJECTS = "projects"


def iso(value: datetime) -> str:
    """UTC ISO 8601 with `Z`, as the API promises."""
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _topics(*classes: type) -> list[str]:
    return [c.TOPIC for c in classes]  # type: ignore[attr-defined]


class MembersView:
    """Token hash -> member (the only way a bearer token is resolved)."""

    name = MEMBERS
    topics = _topics(MemberAdded)

    def keys(self, event: Any) -> Iterable[DocKey]:
        return [(GLOBAL, event.token_hash)]

    def apply(self, batch: ViewBatch, event: Any, position: int) -> None:
        if isinstance(event, MemberAdded):
            batch.put(
                GLOBAL,
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
    topics = _topics(OrganizationCreated)

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


def empty_compute_card() -> Doc:
    return {
        "status": "not_connected",
        "account_id": None,
        "key_fingerprint": None,
        "write_permission": "unproven",
        "balance": None,
        "spend_per_hour": None,
        "connected_at": None,
        "rotated_at": None,
    }


def empty_storage_card() -> Doc:
    return {
        "status": "not_connected",
        "kind": None,
        "volume_id": None,
        "datacenter_id": None,
        "endpoint_url": None,
        "bucket": None,
        "region": None,
        "access_key_fingerprint": None,
        "size_gb": None,
        "cost_per_month": None,
        "locked": False,
    }


def _money(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


def _volume_cost(size_gb: int | None, at: datetime) -> str:
    return str(network_volume_per_month(size_gb or 0, at).quantize(Decimal("0.01")))


class ConnectionsView:
    """The compute and storage cards of `GET /v1/connections`, keyed `compute` and `storage`."""

    name = CONNECTIONS
    topics = _topics(
        ConnectionCreated,
        ConnectionSaved,
        KeyRotated,
        AccountRefreshed,
        WritePermissionProven,
        Disconnected,
        StorageCreated,
        VolumeBound,
        CustomS3Bound,
        StorageCredentialsRotated,
        StorageLocked,
        VolumeResized,
    )

    def keys(self, event: Any) -> Iterable[DocKey]:
        return [(GLOBAL, f"aggregate:{event.originator_id}")]

    def apply(self, batch: ViewBatch, event: Any, position: int) -> None:
        org_id = getattr(event, "org_id", None)
        if isinstance(event, ConnectionCreated | StorageCreated):
            card = "compute" if isinstance(event, ConnectionCreated) else "storage"
            empty = empty_compute_card() if card == "compute" else empty_storage_card()
            batch.put(event.org_id, card, empty)
            batch.put(GLOBAL, f"aggregate:{event.originator_id}", {"org_id": event.org_id})
            return
        if org_id is None:
            org_id = self._org_of(batch, event)
        if org_id is None:
            return
        key = "storage" if isinstance(event, Storage.Event) else "compute"
        doc = batch.get(org_id, key) or (
            empty_storage_card() if key == "storage" else empty_compute_card()
        )
        doc = dict(doc)
        _apply_card(doc, event)
        batch.put(org_id, key, doc)

    @staticmethod
    def _org_of(batch: ViewBatch, event: Any) -> str | None:
        found = batch.get(GLOBAL, f"aggregate:{event.originator_id}")
        return None if found is None else str(found["org_id"])


def _apply_card(doc: Doc, event: Any) -> None:
    at = event.timestamp
    if isinstance(event, ConnectionSaved):
        doc.update(
            status="connected",
            account_id=event.account_id,
            key_fingerprint=event.key_fingerprint,
            write_permission="unproven",
            balance=_money(event.balance),
            spend_per_hour=_money(event.spend_per_hour),
            connected_at=iso(at),
            rotated_at=None,
        )
    elif isinstance(event, KeyRotated):
        doc.update(
            account_id=event.account_id,
            key_fingerprint=event.new_fingerprint,
            write_permission="unproven",
            balance=_money(event.balance),
            spend_per_hour=_money(event.spend_per_hour),
            rotated_at=iso(at),
        )
    elif isinstance(event, AccountRefreshed):
        doc.update(balance=_money(event.balance), spend_per_hour=_money(event.spend_per_hour))
    elif isinstance(event, WritePermissionProven):
        doc["write_permission"] = "proven"
    elif isinstance(event, Disconnected):
        doc.clear()
        doc.update(empty_compute_card())
    elif isinstance(event, VolumeBound):
        doc.update(
            status="connected",
            kind=RUNPOD_VOLUME,
            volume_id=event.volume_id,
            datacenter_id=event.datacenter_id,
            endpoint_url=event.endpoint_url,
            bucket=event.volume_id,
            region=event.datacenter_id,
            access_key_fingerprint=event.access_key_fingerprint,
            size_gb=event.size_gb,
            cost_per_month=_volume_cost(event.size_gb, at),
        )
    elif isinstance(event, CustomS3Bound):
        doc.update(
            status="connected",
            kind=CUSTOM_S3,
            volume_id=None,
            datacenter_id=None,
            endpoint_url=event.endpoint_url,
            bucket=event.bucket,
            region=event.region,
            access_key_fingerprint=event.access_key_fingerprint,
            size_gb=None,
            cost_per_month=None,
        )
    elif isinstance(event, StorageCredentialsRotated):
        doc["access_key_fingerprint"] = event.access_key_fingerprint
    elif isinstance(event, StorageLocked):
        doc["locked"] = True
    elif isinstance(event, VolumeResized):
        doc.update(size_gb=event.new_size_gb, cost_per_month=_volume_cost(event.new_size_gb, at))


class ProjectsView:
    """Projects (`project:<id>`) and their dataset versions (`dataset:<project>:<version id>`)."""

    name = PROJECTS
    topics = _topics(ProjectCreated, DatasetVersionRegistered)

    def apply(self, batch: ViewBatch, event: Any, position: int) -> None:
        project_id = str(event.originator_id)
        if isinstance(event, ProjectCreated):
            batch.put(
                event.org_id,
                f"project:{project_id}",
                {
                    "id": project_id,
                    "name": event.name,
                    "created_at": iso(event.timestamp),
                    "created_by": event.actor,
                },
            )
            batch.put(GLOBAL, f"aggregate:{project_id}", {"org_id": event.org_id})
        elif isinstance(event, DatasetVersionRegistered):
            owner = batch.get(GLOBAL, f"aggregate:{project_id}")
            if owner is None:
                return
            dv = event.dataset_version_id
            batch.put(
                owner["org_id"],
                f"dataset:{project_id}:{dv}",
                {
                    "id": dv,
                    "project_id": project_id,
                    "name": event.name,
                    "version": event.version,
                    "object_key": event.object_key,
                    "size_bytes": event.size_bytes,
                    "row_count": event.row_count,
                    "sha256": event.sha256,
                    "created_at": iso(event.timestamp),
                },
            )


def all_projections() -> list[Any]:
    """Every view the API reads, in the order they are built."""
    return [
        MembersView(),
        OrganizationsView(),
        ConnectionsView(),
        ProjectsView(),
        RunsView(),
        OrphansView(),
        BillingView(),
        AuditView(),
    ]
