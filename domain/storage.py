"""The organization's storage backend (S1–S7): a RunPod network volume or custom S3."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from domain.base import TensorantAggregate, stable_id, topic
from domain.errors import Conflict, DomainError
from domain.rates import network_volume_per_month

NOT_CONNECTED, CONNECTED = "not_connected", "connected"
RUNPOD_VOLUME, CUSTOM_S3 = "runpod_volume", "s3"

# S2/S3: the datacenters whose volumes speak the S3 API (docs/runpod.md, S3 API).
S3_DATACENTERS = (
    "EU-CZ-1",
    "EU-RO-1",
    "EUR-IS-1",
    "EUR-NO-1",
    "US-CA-2",
    "US-GA-2",
    "US-IL-1",
    "US-KS-2",
    "US-MD-1",
    "US-MO-1",
    "US-MO-2",
    "US-NC-1",
    "US-NC-2",
    "US-NE-1",
    "US-WA-1",
)


def ensure_s3_datacenter(datacenter_id: str) -> None:
    """S3: a volume in a datacenter without the S3 API cannot be bound."""
    if datacenter_id not in S3_DATACENTERS:
        raise DatacenterWithoutS3(
            f"datacenter {datacenter_id} has no S3 API support; create the volume in one of: "
            + ", ".join(S3_DATACENTERS),
            supported=list(S3_DATACENTERS),
        )


class Storage(TensorantAggregate):
    TOPIC = "tensorant.Storage"

    class Event(TensorantAggregate.Event):
        TOPIC = "tensorant.Storage.Event"

    class Created(Event, TensorantAggregate.Created):
        TOPIC = "tensorant.Storage.Created"

    def __init__(self) -> None:
        """State is set by the created event's apply(); annotations below only document it."""

    org_id: str
    status: str
    kind: str | None
    volume_id: str | None
    datacenter_id: str | None
    endpoint_url: str | None
    bucket: str | None
    region: str | None
    access_key_fingerprint: str | None
    size_gb: int | None
    locked: bool
    bound_at: datetime | None

    @staticmethod
    def id_for(org_id: str) -> Any:
        return stable_id("storage", org_id)

    @classmethod
    def open(cls, org_id: str, actor: str, at: datetime) -> Storage:
        return cls._create(
            StorageCreated, id=cls.id_for(org_id), actor=actor, timestamp=at, org_id=org_id
        )

    @property
    def location(self) -> tuple[Any, ...]:
        return (self.kind, self.bucket, self.datacenter_id, self.endpoint_url)

    def record_check_failed(
        self, kind: str, step: str, detail: str, actor: str, at: datetime
    ) -> None:
        self._trigger(StorageCheckFailed, actor, at, kind=kind, step=step, detail=detail)

    def ensure_location_may_change(self, new_location: tuple[Any, ...]) -> bool:
        """S5: True when only credentials change; refuses a move once a project exists."""
        if self.status == CONNECTED and new_location == self.location:
            return True
        if self.locked:
            raise StorageLocationLocked(
                "projects already use this storage location; it cannot change through "
                "Connections — moving existing data needs a migration. Rotating credentials "
                "for the same location is allowed."
            )
        return False

    def bind_volume(
        self,
        volume_id: str,
        datacenter_id: str,
        endpoint_url: str,
        size_gb: int,
        access_key_fingerprint: str,
        actor: str,
        at: datetime,
    ) -> None:
        ensure_s3_datacenter(datacenter_id)
        same = self.ensure_location_may_change(
            (RUNPOD_VOLUME, volume_id, datacenter_id, endpoint_url)
        )
        if same:
            self.rotate_credentials(access_key_fingerprint, actor, at)
            return
        self._trigger(
            VolumeBound,
            actor,
            at,
            volume_id=volume_id,
            datacenter_id=datacenter_id,
            endpoint_url=endpoint_url,
            size_gb=size_gb,
            access_key_fingerprint=access_key_fingerprint,
        )

    def bind_custom_s3(
        self,
        endpoint_url: str,
        bucket: str,
        region: str,
        access_key_fingerprint: str,
        actor: str,
        at: datetime,
    ) -> None:
        if not bucket.strip() or not region.strip():
            raise InvalidStorage("custom S3 needs a bucket and a region")
        same = self.ensure_location_may_change((CUSTOM_S3, bucket, None, endpoint_url))
        if same:
            self.rotate_credentials(access_key_fingerprint, actor, at)
            return
        self._trigger(
            CustomS3Bound,
            actor,
            at,
            endpoint_url=endpoint_url,
            bucket=bucket,
            region=region,
            access_key_fingerprint=access_key_fingerprint,
        )

    def rotate_credentials(self, access_key_fingerprint: str, actor: str, at: datetime) -> None:
        self.ensure_connected()
        self._trigger(
            StorageCredentialsRotated,
            actor,
            at,
            old_fingerprint=self.access_key_fingerprint or "",
            access_key_fingerprint=access_key_fingerprint,
        )

    def lock(self, project_id: str, actor: str, at: datetime) -> None:
        """P1/S5: the first project pins the location."""
        self.ensure_connected()
        if not self.locked:
            self._trigger(StorageLocked, actor, at, project_id=project_id)

    def resize(self, size_gb: int, actor: str, at: datetime) -> None:
        """S6: a network volume grows, never shrinks."""
        self.ensure_connected()
        if self.kind != RUNPOD_VOLUME:
            raise InvalidStorage("only a RunPod network volume has a size to change")
        if size_gb > 4000:
            raise InvalidStorage("RunPod volumes are at most 4,000 GB through the API")
        if size_gb <= (self.size_gb or 0):
            raise VolumeCannotShrink(
                f"a network volume can grow but never shrink: it is {self.size_gb} GB now, "
                f"{size_gb} GB is not larger"
            )
        self._trigger(VolumeResized, actor, at, old_size_gb=self.size_gb or 0, new_size_gb=size_gb)

    def ensure_connected(self) -> None:
        if self.status != CONNECTED:
            raise StorageNotConnected("connect storage first (Settings → Connections)")

    def cost_per_month(self, at: datetime) -> Decimal | None:
        """S2: a network volume bills from the moment it exists, before any training."""
        if self.status != CONNECTED or self.kind != RUNPOD_VOLUME:
            return None
        return network_volume_per_month(self.size_gb or 0, at)


@topic("tensorant.StorageCreated")
class StorageCreated(Storage.Created):
    org_id: str

    def apply(self, aggregate: Storage) -> None:
        aggregate.org_id = self.org_id
        aggregate.status = NOT_CONNECTED
        aggregate.kind = aggregate.volume_id = aggregate.datacenter_id = None
        aggregate.endpoint_url = aggregate.bucket = aggregate.region = None
        aggregate.access_key_fingerprint = None
        aggregate.size_gb = None
        aggregate.locked = False
        aggregate.bound_at = None


@topic("tensorant.StorageCheckFailed")
class StorageCheckFailed(Storage.Event):
    kind: str
    step: str
    detail: str


@topic("tensorant.VolumeBound")
class VolumeBound(Storage.Event):
    volume_id: str
    datacenter_id: str
    endpoint_url: str
    size_gb: int
    access_key_fingerprint: str

    def apply(self, aggregate: Storage) -> None:
        aggregate.status, aggregate.kind = CONNECTED, RUNPOD_VOLUME
        aggregate.volume_id = aggregate.bucket = self.volume_id
        aggregate.datacenter_id = aggregate.region = self.datacenter_id
        aggregate.endpoint_url = self.endpoint_url
        aggregate.size_gb = self.size_gb
        aggregate.access_key_fingerprint = self.access_key_fingerprint
        aggregate.bound_at = self.timestamp


@topic("tensorant.CustomS3Bound")
class CustomS3Bound(Storage.Event):
    endpoint_url: str
    bucket: str
    region: str
    access_key_fingerprint: str

    def apply(self, aggregate: Storage) -> None:
        aggregate.status, aggregate.kind = CONNECTED, CUSTOM_S3
        aggregate.volume_id = aggregate.datacenter_id = None
        aggregate.size_gb = None
        aggregate.endpoint_url, aggregate.bucket = self.endpoint_url, self.bucket
        aggregate.region = self.region
        aggregate.access_key_fingerprint = self.access_key_fingerprint
        aggregate.bound_at = self.timestamp


@topic("tensorant.StorageCredentialsRotated")
class StorageCredentialsRotated(Storage.Event):
    old_fingerprint: str
    access_key_fingerprint: str

    def apply(self, aggregate: Storage) -> None:
        aggregate.access_key_fingerprint = self.access_key_fingerprint


@topic("tensorant.StorageLocked")
class StorageLocked(Storage.Event):
    project_id: str

    def apply(self, aggregate: Storage) -> None:
        aggregate.locked = True


@topic("tensorant.VolumeResized")
class VolumeResized(Storage.Event):
    old_size_gb: int
    new_size_gb: int

    def apply(self, aggregate: Storage) -> None:
        aggregate.size_gb = self.new_size_gb


class InvalidStorage(DomainError):
    problem = "invalid-storage"


class DatacenterWithoutS3(DomainError):
    problem = "datacenter-without-s3"
    title = "The datacenter has no S3 API"


class StorageLocationLocked(Conflict):
    problem = "storage-locked"
    title = "The storage location is locked by existing projects"


class VolumeCannotShrink(DomainError):
    problem = "volume-cannot-shrink"
    title = "A network volume cannot shrink"


class StorageNotConnected(Conflict):
    problem = "storage-not-connected"
    title = "Storage is not connected"
