"""Storage: discover volumes, bind, rotate credentials, resize (S1–S6)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from api.deps import ConnectionsDep, Owner, SettleDep, StorageDep, ViewsDep, VolumeDiscoverer
from api.routes.connections import checks, storage_card
from api.schemas.common import AUTHENTICATED
from api.schemas.connections import StorageCard
from api.schemas.storage import (
    ResizeIn,
    StorageIn,
    StorageRotateIn,
    VolumePublic,
    VolumeStorageIn,
)
from application.storage import BindCustomS3, BindVolume
from domain.storage import S3_DATACENTERS

router = APIRouter(prefix="/v1/storage", tags=["storage"], responses=AUTHENTICATED)


@router.get("/volumes", response_model=list[VolumePublic])
def volumes(caller: VolumeDiscoverer, connections: ConnectionsDep) -> list[VolumePublic]:
    """S2: the network volumes the compute key can see, and whether each speaks S3."""
    return [
        VolumePublic(
            id=v.id,
            name=v.name,
            size_gb=v.size_gb,
            datacenter_id=v.datacenter_id,
            s3_api=v.datacenter_id in S3_DATACENTERS,
        )
        for v in connections.discover_volumes(caller.org_id)
    ]


@router.put("", response_model=StorageCard)
def bind(
    request: Request,
    body: StorageIn,
    caller: Owner,
    service: StorageDep,
    settle: SettleDep,
    views: ViewsDep,
) -> StorageCard:
    """S2–S5: bound only after the storage check passed (failed checks are slowed)."""
    fields = body.model_dump(exclude={"kind"})

    def bind_it() -> int:
        if isinstance(body, VolumeStorageIn):
            return service.bind_volume(caller.org_id, caller.actor, BindVolume(**fields))
        return service.bind_custom_s3(caller.org_id, caller.actor, BindCustomS3(**fields))

    settle(checks(request).guard(caller.org_id, bind_it))
    return storage_card(views, caller.org_id)


@router.post("/rotate", response_model=StorageCard)
def rotate(
    request: Request,
    body: StorageRotateIn,
    caller: Owner,
    service: StorageDep,
    settle: SettleDep,
    views: ViewsDep,
) -> StorageCard:
    """S5: new credentials for the same location (checked first; failed checks are slowed)."""
    settle(
        checks(request).guard(
            caller.org_id,
            lambda: service.rotate_credentials(
                caller.org_id, caller.actor, body.access_key_id, body.secret_access_key
            ),
        )
    )
    return storage_card(views, caller.org_id)


@router.post("/resize", response_model=StorageCard)
def resize(
    body: ResizeIn, caller: Owner, service: StorageDep, settle: SettleDep, views: ViewsDep
) -> StorageCard:
    """S6: a network volume grows, never shrinks."""
    settle(service.resize_volume(caller.org_id, caller.actor, body.size_gb))
    return storage_card(views, caller.org_id)
