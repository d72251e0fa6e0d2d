"""Serving endpoints as the reconciler sees them at RunPod (V3): what each bills and who owns it.

One `ServingEndpoints` aggregate per organization (stable id), opened when the reconciler first
sees an endpoint with our naming (`tensorant-serve-…`). An endpoint is recorded when first seen
and again only when what it bills changed (workers up, the minimum, the price per hour) or its
owner did (a deployment keeps it, or none does: an orphan); `ServingEndpointGone` once RunPod no
longer lists it. Cleanup reads these: an endpoint bills while workers are up or its minimum is
above zero, and an orphan bills nobody's deployment (V3).

Events carry ids, names, counts and prices; never the RunPod key or the endpoint's env.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from domain.base import TensorantAggregate, stable_id, topic
from domain.deployment import ENDPOINT_PREFIX

# Flex prices per second of one worker per serverless GPU pool (RunPod's serverless pricing:
# 24 GB $0.00019, 48 GB $0.00034, 80 GB $0.00076; the PRO pools from the same table).
POOL_PRICE_PER_SECOND: dict[str, Decimal] = {
    "AMPERE_16": Decimal("0.00016"),
    "AMPERE_24": Decimal("0.00019"),
    "ADA_24": Decimal("0.00019"),
    "AMPERE_48": Decimal("0.00034"),
    "ADA_48_PRO": Decimal("0.00053"),
    "AMPERE_80": Decimal("0.00076"),
    "ADA_80_PRO": Decimal("0.00116"),
    "HOPPER_141": Decimal("0.00155"),
}


def is_ours(name: str) -> bool:
    """An endpoint named as Tensorant names the endpoints it creates."""
    return name.startswith(ENDPOINT_PREFIX)


def price_per_hour(worker_pools: list[str], endpoint_pools: list[str], minimum: int) -> Decimal:
    """What the endpoint costs per hour while its workers answer: each worker up at its pool's
    price, and at least `minimum` workers (RunPod keeps that many up) at the endpoint's first
    pool. A pool we have no price for counts as the dearest one (never under-stated)."""
    dearest = max(POOL_PRICE_PER_SECOND.values())
    default = endpoint_pools[0] if endpoint_pools else ""
    pools = list(worker_pools) + [default] * max(minimum - len(worker_pools), 0)
    per_second = sum((POOL_PRICE_PER_SECOND.get(p, dearest) for p in pools), Decimal(0))
    return per_second * 3600


class ServingEndpoints(TensorantAggregate):
    TOPIC = "tensorant.ServingEndpoints"

    class Event(TensorantAggregate.Event):
        TOPIC = "tensorant.ServingEndpoints.Event"

    class Created(Event, TensorantAggregate.Created):
        TOPIC = "tensorant.ServingEndpoints.Created"

    def __init__(self) -> None:
        """State is set by the created event's apply(); annotations below only document it."""

    org_id: str
    endpoints: dict[str, dict[str, Any]]  # endpoint id -> the last seen facts (live ones only)

    @staticmethod
    def id_for(org_id: str) -> Any:
        return stable_id("serving-endpoints", org_id)

    @classmethod
    def open(cls, org_id: str, actor: str, at: datetime) -> ServingEndpoints:
        return cls._create(
            ServingEndpointsOpened, id=cls.id_for(org_id), actor=actor, timestamp=at, org_id=org_id
        )

    def record_seen(
        self,
        endpoint_id: str,
        name: str,
        orphan: bool,
        workers_up: int,
        workers_min: int,
        workers_max: int,
        price_per_hour: Decimal,
        actor: str,
        at: datetime,
    ) -> bool:
        """Recorded when new or changed (idempotent otherwise); True when recorded."""
        facts = {
            "name": name,
            "orphan": orphan,
            "workers_up": workers_up,
            "workers_min": workers_min,
            "workers_max": workers_max,
            "price_per_hour": str(price_per_hour),
        }
        if self.endpoints.get(endpoint_id) == facts:
            return False
        self._trigger(ServingEndpointSeen, actor, at, endpoint_id=endpoint_id, **facts)
        return True

    def record_gone(self, endpoint_id: str, actor: str, at: datetime) -> None:
        """RunPod no longer lists the endpoint."""
        if endpoint_id in self.endpoints:
            self._trigger(ServingEndpointGone, actor, at, endpoint_id=endpoint_id)


@topic("tensorant.ServingEndpointsOpened")
class ServingEndpointsOpened(ServingEndpoints.Created):
    org_id: str

    def apply(self, aggregate: ServingEndpoints) -> None:
        aggregate.org_id = self.org_id
        aggregate.endpoints = {}


@topic("tensorant.ServingEndpointSeen")
class ServingEndpointSeen(ServingEndpoints.Event):
    endpoint_id: str
    name: str
    orphan: bool  # no deployment of the organization keeps it
    workers_up: int  # running, idle or initializing
    workers_min: int
    workers_max: int
    price_per_hour: str  # USD, while the workers up (at least the minimum) answer

    def apply(self, aggregate: ServingEndpoints) -> None:
        aggregate.endpoints[self.endpoint_id] = {
            "name": self.name,
            "orphan": self.orphan,
            "workers_up": self.workers_up,
            "workers_min": self.workers_min,
            "workers_max": self.workers_max,
            "price_per_hour": self.price_per_hour,
        }


@topic("tensorant.ServingEndpointGone")
class ServingEndpointGone(ServingEndpoints.Event):
    endpoint_id: str

    def apply(self, aggregate: ServingEndpoints) -> None:
        aggregate.endpoints.pop(self.endpoint_id, None)
