"""Reconciliation with RunPod's bill (B4): record what RunPod billed, hour by hour.

Our estimate comes from the billing view; this reads RunPod's hourly records through the
compute port (`billing_pods`, `billing_volumes`), keeps those of resources the organization
owns (the view says which), and records new or changed amounts as `ProviderChargesRecorded`
on the organization's `ProviderBill` of that UTC day. An hour counts as billed once it has
ended `settle_lag` before the read (RunPod books charges every few minutes).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from application.connections import ConnectionService
from application.log import TensorantLog
from application.ports import BillingRecord, Clock, ComputeProvider, OwnedResources, RunIndex
from domain.base import SYSTEM
from domain.billing import NETWORK_VOLUME, POD, SERVERLESS, ProviderBill
from domain.errors import NotFound
from domain.times import iso

log = logging.getLogger("tensorant.billing")
HOUR = timedelta(hours=1)


@dataclass(frozen=True)
class ReconcileResult:
    records_read: int
    charges_recorded: int
    position: int


def _hour(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


@dataclass(frozen=True)
class BillingReconciler:
    log: TensorantLog
    compute: ComputeProvider
    clock: Clock
    connections: ConnectionService
    runs: RunIndex
    owned: OwnedResources
    # V3: RunPod's hourly records of the organization's serving endpoints, when serving is wired.
    serverless: Callable[[str, datetime, datetime], list[BillingRecord]] | None = None

    def reconcile_all(self, days: int = 3) -> int:
        """Every connected organization's last `days` of RunPod's bill (idempotent); the
        billing ticker runs this. Returns the charges recorded."""
        start = self.clock.now() - timedelta(days=days)
        recorded = 0
        for org_id in self.runs.org_ids():
            try:
                recorded += self.reconcile(org_id, start).charges_recorded
            except Exception:  # one organization's bill must not stop the others
                log.exception("billing reconciliation of organization %s failed", org_id)
        return recorded

    def reconcile(
        self,
        org_id: str,
        start: datetime,
        end: datetime | None = None,
        *,
        settle_lag: timedelta = timedelta(minutes=10),
        actor: str = SYSTEM,
    ) -> ReconcileResult:
        """Read RunPod's hourly bill for [start, end) and record what is new or changed."""
        now = self.clock.now()
        lo = _hour(start)
        hi = _hour(min(end or now, now - settle_lag))
        if hi <= lo:
            return ReconcileResult(0, 0, 0)
        key = self.connections.runpod_key(org_id)
        mine = self.owned.owned(org_id)
        read: list[tuple[str, BillingRecord]] = [
            (POD, r) for r in self.compute.billing_pods(key, lo, hi)
        ] + [(NETWORK_VOLUME, r) for r in self.compute.billing_volumes(key, lo, hi)]
        if self.serverless is not None and any(kind == SERVERLESS for kind, _ in mine):
            read += [(SERVERLESS, r) for r in self.serverless(key, lo, hi)]
        by_day: dict[date, list[dict[str, str]]] = defaultdict(list)
        for kind, rec in read:
            if (kind, rec.resource_id) not in mine or rec.end > hi or rec.end - rec.start != HOUR:
                continue
            by_day[rec.start.astimezone(UTC).date()].append(
                {
                    "kind": kind,
                    "resource_id": rec.resource_id,
                    "start": iso(rec.start),
                    "end": iso(rec.end),
                    "amount": str(rec.amount),
                }
            )
        recorded, position = 0, 0
        for day, charges in sorted(by_day.items()):
            bill = self._bill(org_id, day, actor, now)
            n = bill.record(
                sorted(charges, key=lambda c: (c["start"], c["kind"], c["resource_id"])),
                actor,
                now,
            )
            position = max(position, self.log.save_all(bill))  # nothing new: nothing saved
            recorded += n
        return ReconcileResult(len(read), recorded, position)

    def _bill(self, org_id: str, day: date, actor: str, at: datetime) -> ProviderBill:
        try:
            return self.log.load(ProviderBill, ProviderBill.id_for(org_id, day), org_id)
        except NotFound:
            return ProviderBill.open(org_id, day, actor, at)
