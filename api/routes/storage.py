"""Storage: discover volumes, bind, rotate credentials, resize (S1–S6)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from api.actions import storage
from api.actions.connections import checks
from api.deps import BackendDep, Owner, VolumeDiscoverer
from api.schemas.common import AUTHENTICATED
from api.schemas.connections import StorageCard
from api.schemas.storage import ResizeIn, StorageIn, StorageRotateIn, VolumePublic

router = APIRouter(prefix="/v1/storage", tags=["storage"], responses=AUTHENTICATED)


@router.get("/volumes", response_model=list[VolumePublic])
def volumes(caller: VolumeDiscoverer, backend: BackendDep) -> list[VolumePublic]:
    """S2: the network volumes the compute key can see, and whether each speaks S3."""
    return storage.volumes(backend=backend, caller=caller)


@router.put("", response_model=StorageCard)
def bind(request: Request, body: StorageIn, caller: Owner, backend: BackendDep) -> StorageCard:
    """S2–S5: bound only after the storage check passed (failed checks are slowed)."""
    return storage.bind(backend=backend, caller=caller, checks=checks(request), body=body)


@router.post("/rotate", response_model=StorageCard)
def rotate(
    request: Request, body: StorageRotateIn, caller: Owner, backend: BackendDep
) -> StorageCard:
    """S5: new credentials for the same location (checked first; failed checks are slowed)."""
    return storage.rotate(
        backend=backend,
        caller=caller,
        checks=checks(request),
        access_key_id=body.access_key_id,
        secret_access_key=body.secret_access_key,
    )


@router.post("/resize", response_model=StorageCard)
def resize(body: ResizeIn, caller: Owner, backend: BackendDep) -> StorageCard:
    """S6: a network volume grows, never shrinks."""
    return storage.resize(backend=backend, caller=caller, size_gb=body.size_gb)
