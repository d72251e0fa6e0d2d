"""The compute and storage cards of `GET /v1/connections` (C1–C5, S1–S7), keyed `compute` and
`storage` per organization; money stays a decimal string."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
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
from domain.hub import (
    HubConnection,
    HubConnectionOpened,
    HubTokenRemoved,
    HubTokenRotated,
    HubTokenSaved,
)
from domain.ids import id_text
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
from domain.times import iso
from projections.store.base import INDEX, Doc, DocKey, ViewBatch
from projections.store.engine import topics_of

CONNECTIONS = "connections"


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


def empty_hub_card() -> Doc:
    return {
        "status": "not_connected",
        "username": None,
        "role": None,
        "token_fingerprint": None,
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
    rebuild_weight = 3.6  # see `AuditView.rebuild_weight`
    topics = topics_of(
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
        HubConnectionOpened,
        HubTokenSaved,
        HubTokenRotated,
        HubTokenRemoved,
    )

    def keys(self, event: Any) -> Iterable[DocKey]:
        return [(INDEX, f"aggregate:{id_text(event.originator_id)}")]

    def apply(self, batch: ViewBatch, event: Any, position: int) -> None:
        org_id = getattr(event, "org_id", None)
        if isinstance(event, ConnectionCreated | StorageCreated | HubConnectionOpened):
            card = _card_of(event)
            batch.put(event.org_id, card, _EMPTY[card]())
            batch.put(INDEX, f"aggregate:{id_text(event.originator_id)}", {"org_id": event.org_id})
            return
        if org_id is None:
            org_id = self._org_of(batch, event)
        if org_id is None:
            return
        key = _card_of(event)
        doc = batch.get(org_id, key) or _EMPTY[key]()
        doc = dict(doc)
        _apply_card(doc, event)
        batch.put(org_id, key, doc)

    @staticmethod
    def _org_of(batch: ViewBatch, event: Any) -> str | None:
        found = batch.get(INDEX, f"aggregate:{id_text(event.originator_id)}")
        return None if found is None else str(found["org_id"])


_EMPTY = {
    "compute": empty_compute_card,
    "storage": empty_storage_card,
    "huggingface": empty_hub_card,
}


def _card_of(event: Any) -> str:
    if isinstance(event, Storage.Event):
        return "storage"
    if isinstance(event, HubConnection.Event):
        return "huggingface"
    return "compute"


def _apply_hub_card(doc: Doc, event: Any) -> None:
    at = event.timestamp
    if isinstance(event, HubTokenSaved):
        doc.update(
            status="connected",
            username=event.username,
            role=event.role,
            token_fingerprint=event.token_fingerprint,
            connected_at=iso(at),
            rotated_at=None,
        )
    elif isinstance(event, HubTokenRotated):
        doc.update(
            username=event.username,
            role=event.role,
            token_fingerprint=event.new_fingerprint,
            rotated_at=iso(at),
        )
    elif isinstance(event, HubTokenRemoved):
        doc.clear()
        doc.update(empty_hub_card())


def _apply_card(doc: Doc, event: Any) -> None:
    at = event.timestamp
    if isinstance(event, HubConnection.Event):
        _apply_hub_card(doc, event)
    elif isinstance(event, ConnectionSaved):
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
