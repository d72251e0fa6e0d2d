"""Storage: discover volumes, bind, rotate credentials, resize (S1-S7)."""

from __future__ import annotations

from fastapi import APIRouter

from api.deps import AppDep, ContainerDep, Owner, VolumeDiscoverer, settle
from api.routers.common import AUTHENTICATED
from api.routers.connections import storage_card
from api.schemas import ResizeIn, StorageCard, StorageIn, StorageRotateIn, VolumePublic
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
        for v in app.discover_volumes(caller.org_id)
    ]


@router.put("", response_model=StorageCard)
def bind(body: StorageIn, caller: Owner, app: AppDep, container: ContainerDep) -> StorageCard:
    """S2-S5: bound only after the storage check passed."""
    settle(container, app.bind_storage(caller.org_id, caller.actor, body.model_dump()))
    return storage_card(container.views, caller.org_id)


@router.post("/rotate", response_model=StorageCard)
def rotate(
    body: StorageRotateIn, caller: Owner, app: AppDep, container: ContainerDep
) -> StorageCard:
    """S5: new credentials for the same location."""
    settle(
        container,
        app.rotate_storage_credentials(
            caller.org_id, caller.actor, body.access_key_id, body.secret_access_key
        ),
    )
    return storage_card(container.views, caller.org_id)


@router.post("/resize", response_model=StorageCard)
def resize(body: ResizeIn, caller: Owner, app: AppDep, container: ContainerDep) -> StorageCard:
    """S6: a network volume grows, never shrinks."""
    settle(container, app.resize_volume(caller.org_id, caller.actor, body.size_gb))
    return storage_card(container.views, caller.org_id)
