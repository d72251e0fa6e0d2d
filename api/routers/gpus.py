"""The GPU catalog as RunPod offers it now, with our eligibility verdict (R2)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from api.deps import AppDep, Reader, ViewsDep
from api.routers.common import AUTHENTICATED
from api.schemas import GpuPublic
from domain.connection import NotConnected
from domain.gpus import gpu_type, ineligible_reason
from projections.views.connections import CONNECTIONS

router = APIRouter(prefix="/v1/gpus", tags=["gpus"], responses=AUTHENTICATED)


@router.get("", response_model=list[GpuPublic])
def gpus(
    caller: Reader,
    app: AppDep,
    views: ViewsDep,
    datacenter_id: Annotated[str | None, Query(max_length=64)] = None,
) -> list[GpuPublic]:
    card = views.get(CONNECTIONS, caller.org_id, "compute") or {}
    if card.get("status") != "connected":
        raise NotConnected("connect RunPod first (Settings → Connections)")
    offers = app.connections.gpu_offers(caller.org_id)
    out = []
    for o in offers:
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
