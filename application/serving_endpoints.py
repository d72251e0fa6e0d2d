"""Serving endpoints reconciled with RunPod (V3), beside the Pods' reconciliation.

On the reconcile tick, per organization and at most every `ENDPOINTS_EVERY_S` (each pass is
one list and one workers read per endpoint of ours, on the organization's REST quota), the
endpoints with our naming (`tensorant-serve-…`) that RunPod lists are compared with the
deployments:
- one a deployment keeps is recorded with what it bills (workers up, its minimum, the price per
  hour of those workers), only when that changed, so cleanup lists it while it bills;
- one no deployment keeps is an orphan (a deployment deleted while RunPod still lists the
  endpoint, an endpoint made by hand with our naming, another installation's), shown on the
  cleanup page with what to do; one another organization's deployments name is not ours;
- one RunPod no longer lists is recorded gone.
A key without Serverless rights sees no endpoint: nothing is recorded. Every decision is one
structured log line.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from eventsourcing.persistence import IntegrityError

from application import errors
from application.log import TensorantLog
from application.ports import Clock, ServingEndpoint, ServingProvider, ServingWorkers
from domain.base import SYSTEM
from domain.errors import NotFound
from domain.serving_endpoints import ServingEndpoints, is_ours, price_per_hour

log = logging.getLogger("tensorant.reconcile")
# At least this long between two passes of one organization: each pass lists the key's
# endpoints and reads each one's workers, out of the same per-key quota the Pods' calls use.
ENDPOINTS_EVERY_S = 20.0

# (org id, endpoint id, endpoint name) -> True: a deployment of the organization keeps it;
# False: none does (an orphan); None: another organization's deployments name it.
EndpointOwned = Callable[[str, str, str], bool | None]


@dataclass
class EndpointReconciler:
    log: TensorantLog
    serving: ServingProvider
    clock: Clock
    runpod_key: Callable[[str], str]
    owned: EndpointOwned
    every_s: float = ENDPOINTS_EVERY_S
    _last: dict[str, float] = field(default_factory=dict)  # org id -> monotonic time
    _guard: threading.Lock = field(default_factory=threading.Lock)

    def __repr__(self) -> str:  # named in the reactor's log lines
        return "serving endpoints (V3)"

    def reconcile_when_due(self, org_id: str) -> None:
        """The reconcile tick's part (a per-organization driver of the reactor)."""
        now = time.monotonic()
        with self._guard:
            if now - self._last.get(org_id, -1e9) < self.every_s:
                return
            self._last[org_id] = now
        try:
            self.reconcile(org_id)
        except IntegrityError:
            log.info("serving endpoints of %s changed while reconciling; next pass looks", org_id)

    def reconcile(self, org_id: str) -> None:
        try:
            key = self.runpod_key(org_id)
        except errors.SecretUnavailable:
            return  # not connected: nothing at RunPod can be ours
        try:
            listed = [e for e in self.serving.list_endpoints(key) if is_ours(e.name)]
        except errors.InsufficientPermissions:
            return  # a key without Serverless rights: managed serving is off for it
        except errors.ProviderError as e:
            _decision("endpoints_list_failed", org_id, None, error=e.detail[:200])
            return
        at = self.clock.now()
        try:
            book = self.log.load(ServingEndpoints, ServingEndpoints.id_for(org_id), org_id)
        except NotFound:
            book = None
        kept: set[str] = set()  # listed and ours to judge
        for endpoint in listed:
            owned = self.owned(org_id, endpoint.id, endpoint.name)
            if owned is None:
                continue
            kept.add(endpoint.id)
            try:
                workers = self.serving.workers(key, endpoint.id)
            except errors.ProviderError as e:  # the next pass reads them again
                _decision("endpoint_workers_failed", org_id, endpoint.id, error=e.detail[:200])
                continue
            if workers is None:  # deleted between the list and this read
                kept.discard(endpoint.id)
                continue
            book = book or ServingEndpoints.open(org_id, SYSTEM, at)
            self._record(book, endpoint, workers, owned, at)
        if book is None:
            return
        for endpoint_id in list(book.endpoints):
            if endpoint_id not in kept:
                book.record_gone(endpoint_id, SYSTEM, at)
                _decision("endpoint_gone", org_id, endpoint_id)
        if book.pending_events:
            self.log.save_all(book)

    @staticmethod
    def _record(
        book: ServingEndpoints,
        endpoint: ServingEndpoint,
        workers: ServingWorkers,
        owned: bool,
        at: datetime,
    ) -> None:
        was = book.endpoints.get(endpoint.id)
        price = price_per_hour(list(workers.pools), list(endpoint.pools), endpoint.workers_min)
        if book.record_seen(
            endpoint.id,
            endpoint.name,
            not owned,
            workers.up,
            endpoint.workers_min,
            endpoint.workers_max,
            price,
            SYSTEM,
            at,
        ):
            found = not owned and (was is None or not was["orphan"])
            _decision(
                "endpoint_orphan_found" if found else "endpoint_seen",
                book.org_id,
                endpoint.id,
                endpoint_name=endpoint.name,
                workers_up=workers.up,
                workers_min=endpoint.workers_min,
                price_per_hour=str(price),
            )


def _decision(what: str, org_id: str, endpoint_id: str | None, **extra: object) -> None:
    fields = {"decision": what, "org_id": org_id, "endpoint_id": endpoint_id, **extra}
    log.info(
        "reconcile %s org=%s endpoint=%s %s",
        what,
        org_id,
        endpoint_id,
        " ".join(f"{k}={v}" for k, v in extra.items()),
        extra=fields,
    )
