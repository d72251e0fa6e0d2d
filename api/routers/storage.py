"""Storage: discover volumes, bind, rotate credentials, resize (S1-S7)."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import AppDep, ContainerDep, Owner, VolumeDiscoverer, settle
from api.routers.common import AUTHENTICATED
from api.routers.connections import storage_card
from api.schemas import (
    ResizeIn,
    StorageCard,
    StorageIn,
    StorageRotateIn,
    VolumePublic,
    VolumeStorageIn,
)
from application.storage import BindCustomS3, BindVolume
from domain.storage import S3_DATACENTERS

router = APIRouter(prefix="/v1/storage", tags=["storage"], responses=AUTHENTICATED)


@router.get("/volumes", response_model=list[VolumePublic])
def volumes(caller: VolumeDiscoverer, app: AppDep) -> list[VolumePublic]:
    """S2: the network volumes the compute key can see, and whether each speaks S3."""
    return [
        VolumePublic(
            id=v.id,
            name=v.name,
            size_gb=v.size_gb,
            datacenter_id=v.datacenter_id,
            s3_api=v.datacenter_id in S3_DATACENTERS,
        )
        for v in app.connections.discover_volumes(caller.org_id)
    ]


@router.put("", response_model=StorageCard)
def bind(body: StorageIn, caller: Owner, app: AppDep, container: ContainerDep) -> StorageCard:
    """S2-S5: bound only after the storage check passed."""
    if isinstance(body, VolumeStorageIn):
        position = app.storage.bind_volume(
            caller.org_id, caller.actor, BindVolume(**body.model_dump(exclude={"kind"}))
        )
    else:
        position = app.storage.bind_custom_s3(
            caller.org_id, caller.actor, BindCustomS3(**body.model_dump(exclude={"kind"}))
        )
    settle(container, position)
    return storage_card(container.views, caller.org_id)


@router.post("/rotate", response_model=StorageCard)
def rotate(
    body: StorageRotateIn, caller: Owner, app: AppDep, container: ContainerDep
) -> StorageCard:
    """S5: new credentials for the same location."""
    settle(
        container,
        app.storage.rotate_credentials(
            caller.org_id, caller.actor, body.access_key_id, body.secret_access_key
        ),
    )
    return storage_card(container.views, caller.org_id)


@router.post("/resize", response_model=StorageCard)
def resize(body: ResizeIn, caller: Owner, app: AppDep, container: ContainerDep) -> StorageCard:
    """S6: a network volume grows, never shrinks."""
    settle(container, app.storage.resize_volume(caller.org_id, caller.actor, body.size_gb))
    return storage_card(container.views, caller.org_id)
