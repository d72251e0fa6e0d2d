"""What RunPod billed (B4): one ProviderBill aggregate per organization and UTC day.

The reconciler reads RunPod's hourly billing records and records here only the amounts that
are new or changed, so the event log says when each bill became known and what it replaced.
Amounts are decimal strings keyed by (resource kind, resource id, hour start).
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from domain.base import TensorantAggregate, stable_id, topic
from domain.errors import DomainError

POD, NETWORK_VOLUME, SERVERLESS = "pod", "network_volume", "serverless"
RESOURCE_KINDS = (POD, NETWORK_VOLUME, SERVERLESS)  # serverless: a managed-serving endpoint (V3)


def charge_key(kind: str, resource_id: str, start: str) -> str:
    return f"{kind}:{resource_id}:{start}"


class ProviderBill(TensorantAggregate):
    TOPIC = "tensorant.ProviderBill"

    class Event(TensorantAggregate.Event):
        TOPIC = "tensorant.ProviderBill.Event"

    class Created(Event, TensorantAggregate.Created):
        TOPIC = "tensorant.ProviderBill.Created"

    def __init__(self) -> None:
        """State is set by the created event's apply(); annotations below only document it."""

    org_id: str
    day: str
    amounts: dict[str, str]

    @staticmethod
    def id_for(org_id: str, day: date) -> Any:
        return stable_id("provider-bill", f"{org_id}:{day.isoformat()}")

    @classmethod
    def open(cls, org_id: str, day: date, actor: str, at: datetime) -> ProviderBill:
        return cls._create(
            ProviderBillOpened,
            id=cls.id_for(org_id, day),
            actor=actor,
            timestamp=at,
            org_id=org_id,
            day=day.isoformat(),
        )

    def record(self, charges: list[dict[str, str]], actor: str, at: datetime) -> int:
        """Record the hours whose amount is new or changed; returns how many."""
        changed = []
        for c in charges:
            if c["kind"] not in RESOURCE_KINDS:
                raise InvalidProviderCharge(f"unknown resource kind {c['kind']!r}")
            if not c["start"].startswith(self.day):
                raise InvalidProviderCharge(f"hour {c['start']} is not on {self.day}")
            if self.amounts.get(charge_key(c["kind"], c["resource_id"], c["start"])) != c["amount"]:
                changed.append(dict(c))
        if changed:
            self._trigger(ProviderChargesRecorded, actor, at, charges=changed)
        return len(changed)


@topic("tensorant.ProviderBillOpened")
class ProviderBillOpened(ProviderBill.Created):
    org_id: str
    day: str

    def apply(self, aggregate: ProviderBill) -> None:
        aggregate.org_id, aggregate.day = self.org_id, self.day
        aggregate.amounts = {}


@topic("tensorant.ProviderChargesRecorded")
class ProviderChargesRecorded(ProviderBill.Event):
    """Each charge: {kind, resource_id, start, end (ISO, UTC, end exclusive), amount (USD)}."""

    charges: list[dict[str, str]]

    def apply(self, aggregate: ProviderBill) -> None:
        for c in self.charges:
            aggregate.amounts[charge_key(c["kind"], c["resource_id"], c["start"])] = c["amount"]


class InvalidProviderCharge(DomainError):
    problem = "invalid-provider-charge"
    title = "A provider billing record does not fit the bill"
