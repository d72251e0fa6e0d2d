"""Storage: discover volumes, bind, rotate credentials, resize (S1–S6)."""

from __future__ import annotations

from api.actions.connections import storage_card
from api.deps import Backend, Caller, settler
from api.schemas.connections import StorageCard
from api.schemas.storage import S3StorageIn, VolumePublic, VolumeStorageIn
from api.throttle import Throttle
from application.storage import BindCustomS3, BindVolume
from domain.storage import S3_DATACENTERS


def volumes(*, backend: Backend, caller: Caller) -> list[VolumePublic]:
    """S2: the network volumes the compute key can see, and whether each speaks S3."""
    return [
        VolumePublic(
            id=v.id,
            name=v.name,
            size_gb=v.size_gb,
            datacenter_id=v.datacenter_id,
            s3_api=v.datacenter_id in S3_DATACENTERS,
        )
        for v in backend.services.connections.discover_volumes(caller.org_id)
    ]


def bind(
    *, backend: Backend, caller: Caller, checks: Throttle, body: VolumeStorageIn | S3StorageIn
) -> StorageCard:
    """S2–S5: bound only after the storage check passed (failed checks are slowed)."""
    service = backend.services.storage
    fields = body.model_dump(exclude={"kind"})

    def bind_it() -> int:
        if isinstance(body, VolumeStorageIn):
            return service.bind_volume(caller.org_id, caller.actor, BindVolume(**fields))
        return service.bind_custom_s3(caller.org_id, caller.actor, BindCustomS3(**fields))

    settler(backend)(checks.guard(caller.org_id, bind_it))
    return storage_card(views=backend.views, org_id=caller.org_id)


def rotate(
    *,
    backend: Backend,
    caller: Caller,
    checks: Throttle,
    access_key_id: str,
    secret_access_key: str,
) -> StorageCard:
    """S5: new credentials for the same location (checked first; failed checks are slowed)."""
    service = backend.services.storage
    settler(backend)(
        checks.guard(
            caller.org_id,
            lambda: service.rotate_credentials(
                caller.org_id, caller.actor, access_key_id, secret_access_key
            ),
        )
    )
    return storage_card(views=backend.views, org_id=caller.org_id)


def resize(*, backend: Backend, caller: Caller, size_gb: int) -> StorageCard:
    """S6: a network volume grows, never shrinks."""
    settler(backend)(backend.services.storage.resize_volume(caller.org_id, caller.actor, size_gb))
    return storage_card(views=backend.views, org_id=caller.org_id)
