"""The GPU catalog as RunPod offers it now, with our eligibility verdict (R2)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.actions import catalogue
from api.deps import BackendDep, Reader
from api.schemas.common import AUTHENTICATED
from api.schemas.gpus import GpuPublic

router = APIRouter(prefix="/v1/gpus", tags=["gpus"], responses=AUTHENTICATED)


@router.get("", response_model=list[GpuPublic])
def gpus(
    caller: Reader,
    backend: BackendDep,
    datacenter_id: Annotated[str | None, Query(max_length=64)] = None,
    base_model: Annotated[
        str | None,
        Query(
            max_length=200,
            description="judge memory too: can one GPU train this base model (R2, memory model)",
        ),
    ] = None,
) -> list[GpuPublic]:
    return catalogue.gpus(
        backend=backend, caller=caller, datacenter_id=datacenter_id, base_model=base_model
    )
