"""The GPU catalog as RunPod offers it now, with our eligibility verdict (R2)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import ConnectionsDep, Reader
from api.schemas.common import AUTHENTICATED
from api.schemas.gpus import GpuPublic
from domain.gpus import gpu_type, ineligible_reason

router = APIRouter(prefix="/v1/gpus", tags=["gpus"], responses=AUTHENTICATED)


@router.get("", response_model=list[GpuPublic])
def gpus(
    caller: Reader,
    connections: ConnectionsDep,
    datacenter_id: Annotated[str | None, Query(max_length=64)] = None,
) -> list[GpuPublic]:
    out = []
    for o in connections.gpu_offers(caller.org_id):
        if datacenter_id and datacenter_id.upper() not in o.datacenters:
            continue
        reason = ineligible_reason(o.id)
        out.append(
            GpuPublic(
                id=o.id,
                display_name=o.display_name,
                memory_gb=o.memory_gb,
                architecture=gpu_type(o.id, o.memory_gb).architecture,
                eligible=reason is None,
                ineligible_reason=reason,
                price_per_hour=str(o.price_per_hour),
                stock=dict(o.stock),
                datacenters=o.datacenters,
            )
        )
    return sorted(out, key=lambda g: (not g.eligible, g.price_per_hour, g.id))
