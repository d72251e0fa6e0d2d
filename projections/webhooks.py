"""Webhook deliveries (R20), driven by the log: the `webhook_outbox` projection and its sender.

The projection follows the log like the outbox relay (`projections/relay.py`): Run, orphan and
webhook-endpoint events only. For each event that means something to a receiver (a run entered
a state; a Pod bills after its run ended; a Pod's termination needs manual action; a launch was
refused for the balance) it writes one delivery document per endpoint of that organization
subscribed to it, in the same transaction as its tracking position. So a crash never loses a
delivery (it was written with the position, or the events are read again) and never makes one
twice (the position moved with it).

The `Deliverer` sends what is due: it claims a delivery (a lease, so copies in other processes
leave it alone), POSTs it signed, and records the attempt: delivered, or the next attempt after
an exponential backoff (capped), or failed after the last attempt. A crash between the POST and
its record sends it again with the same event id and `Idempotency-Key`: at-least-once.

The view: per organization `delivery:<endpoint id>:<countdown>` (newest first) -> the
delivery (payload, status, attempts, each attempt's status code or error, next attempt);
(INDEX, `pending:<org>:<endpoint>:<position>.<n>`) -> {org_id, endpoint_id, key, due, lease}
for each delivery not yet settled (oldest first); (INDEX, `run:<id>`) -> where each run is in
its life cycle (`domain.run.advance`); (INDEX, `endpoint:<id>`, `subscribers:<org>`,
`orphans:<aggregate id>`, `connection:<aggregate id>`) -> what they belong to. The projection
writes a delivery once and never again; only the `Deliverer` changes it afterwards (under the
view's lock, without moving its position), so the engine's cache of the projection's own last
batch never holds a delivery it would write back.

Never rebuild it: a rebuild would send every delivery ever made again.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from eventsourcing.application import Application

import domain.connection as c
import domain.orphans as o
import domain.run as r
from application.errors import SecretUnavailable
from application.ports import SecretVault
from application.webhooks import DeliveryFailed, Transport
from domain.base import event_topics
from domain.ids import id_text
from domain.times import iso
from domain.webhook import (
    BALANCE_LOW,
    CLEANUP_NEEDS_MANUAL,
    EVENT_ID_HEADER,
    IDEMPOTENCY_HEADER,
    POD_STILL_BILLING,
    RUN_STATE_CHANGED,
    SIGNATURE_HEADER,
    WebhookEndpoint,
    WebhookRegistered,
    WebhookRemoved,
    backoff_seconds,
    signature_header,
    vault_name,
)
from projections.store.base import INDEX, Doc, ViewBatch, ViewStore
from projections.store.engine import Projector

log = logging.getLogger("tensorant.webhooks")

WEBHOOK_OUTBOX = "webhook_outbox"
PENDING, DELIVERED, FAILED, CANCELLED = "pending", "delivered", "failed", "cancelled"
_EVENT_IDS = uuid.UUID("6c7a4f1e-9d0b-4c59-a3f4-1f0e0b7d2a51")  # the namespace of event ids
_LOW_BALANCE = "low-balance"
_BILLING = (r.POD_RUNNING, r.POD_STOPPED, r.POD_NEEDS_MANUAL)
_KEPT_ATTEMPTS = 20  # each delivery shows its last attempts


def event_id(position: int, n: int) -> str:
    """A webhook event's id: the same for every endpoint and every attempt (the receiver's
    idempotency key), from the log position that caused it."""
    return "evt_" + uuid.uuid5(_EVENT_IDS, f"{position}.{n}").hex


_TOP = 10**12 - 1  # positions are below it; a delivery's key counts down from it


def delivery_key(endpoint_id: str, position: int, n: int) -> str:
    """Newest first in key order: an endpoint's latest deliveries are one bounded read."""
    return f"delivery:{endpoint_id}:{_TOP - position:012d}.{99 - n:02d}"


def pending_key(org_id: str, endpoint_id: str, position: int, n: int) -> str:
    """Oldest first in key order: each endpoint's deliveries are attempted in the log's order."""
    return f"pending:{org_id}:{endpoint_id}:{position:012d}.{n:02d}"


def stamp(ts: float) -> str:
    """A wall-clock time with milliseconds (backoffs can be shorter than a second)."""
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


# ---------------------------------------------------------------- the projection


class WebhookOutbox:
    """The `webhook_outbox` projection: one delivery per (webhook event, subscribed endpoint)."""

    name = WEBHOOK_OUTBOX

    def __init__(self, balance_warning_days: float = 7.0) -> None:
        """`balance_warning_days`: `balance.low` when the balance covers fewer days of the
        account's spend (the setting `/v1/cleanup` warns with, BALANCE_WARNING_DAYS)."""
        self.warning_hours = Decimal(str(balance_warning_days)) * 24

    @property
    def topics(self) -> list[str]:
        return [
            *event_topics(r.Run.Event),
            *event_topics(o.OrphanPods.Event),
            *event_topics(WebhookEndpoint.Event),
            c.ConnectionCreated.TOPIC,
            c.ConnectionSaved.TOPIC,
            c.AccountRefreshed.TOPIC,
        ]

    def apply(self, batch: ViewBatch, event: Any, position: int) -> None:
        if isinstance(event, c.Connection.Event):
            self._account(batch, event, position)
        elif isinstance(event, WebhookEndpoint.Event):
            self._endpoint(batch, event)
        elif isinstance(event, r.Run.Event):
            self._run(batch, event, position)
        elif isinstance(event, o.OrphanPods.Event):
            self._orphan(batch, event, position)

    def _endpoint(self, batch: ViewBatch, event: Any) -> None:
        endpoint_id = id_text(event.originator_id)
        if isinstance(event, WebhookRegistered):
            batch.put(
                INDEX,
                f"endpoint:{endpoint_id}",
                {"org_id": event.org_id, "url": event.url, "events": list(event.events)},
            )
            subscribers = batch.get(INDEX, f"subscribers:{event.org_id}") or {"ids": []}
            batch.put(
                INDEX,
                f"subscribers:{event.org_id}",
                {"ids": [*subscribers["ids"], endpoint_id]},
            )
        elif isinstance(event, WebhookRemoved):
            found = batch.get(INDEX, f"endpoint:{endpoint_id}")
            if found is None:
                return
            batch.delete(INDEX, f"endpoint:{endpoint_id}")
            org_id = str(found["org_id"])
            subscribers = batch.get(INDEX, f"subscribers:{org_id}") or {"ids": []}
            ids = [i for i in subscribers["ids"] if i != endpoint_id]
            batch.put(INDEX, f"subscribers:{org_id}", {"ids": ids})

    def _run(self, batch: ViewBatch, event: Any, position: int) -> None:
        run_id = id_text(event.originator_id)
        key = f"run:{run_id}"
        doc = batch.get(INDEX, key)
        if isinstance(event, r.RunDrafted):
            doc = {"org_id": event.org_id, "pod_id": None}
            before = None
        elif doc is None:
            return  # a run from before this view began: nothing to compare with
        else:
            before = r.Lifecycle(**doc["life"])
        now = life = r.advance(before, event)
        org_id = str(doc["org_id"])
        if isinstance(event, r.PodLaunched):
            doc["pod_id"] = event.pod_id
        doc["life"] = {
            "state": life.state,
            "reason": life.reason,
            "pod_status": life.pod_status,
            "has_pod": life.has_pod,
            "stop_reason": life.stop_reason,
            "termination_intent": life.termination_intent,
        }
        batch.put(INDEX, key, doc)
        told: list[tuple[str, dict[str, Any]]] = []
        base = {"run_id": run_id}
        if now.entered:
            told.append(
                (
                    RUN_STATE_CHANGED,
                    {
                        **base,
                        "state": now.state,
                        "previous_state": None if before is None else before.state,
                        "reason": now.reason,
                        "pod_status": now.pod_status,
                    },
                )
            )
            if now.state in r.TERMINAL and now.pod_status in _BILLING:
                told.append(
                    (
                        POD_STILL_BILLING,
                        {
                            **base,
                            "pod_id": doc["pod_id"],
                            "pod_status": now.pod_status,
                            "state": now.state,
                        },
                    )
                )
        was_manual = before is not None and before.pod_status == r.POD_NEEDS_MANUAL
        if now.pod_status == r.POD_NEEDS_MANUAL and not was_manual:
            told.append(
                (
                    CLEANUP_NEEDS_MANUAL,
                    {**base, "pod_id": doc["pod_id"], "attempts": getattr(event, "attempt", None)},
                )
            )
        if isinstance(event, r.LaunchRejected) and event.reason == _LOW_BALANCE:
            told.append((BALANCE_LOW, {**base, "detail": event.detail}))
        self._fan_out(batch, org_id, event, position, told)

    def _account(self, batch: ViewBatch, event: Any, position: int) -> None:
        """`balance.low` once when the balance falls below the warning, again only after it
        recovered (a refresh every minute would otherwise repeat it)."""
        agg = f"connection:{id_text(event.originator_id)}"
        if isinstance(event, c.ConnectionCreated):
            batch.put(INDEX, agg, {"org_id": event.org_id, "low": False})
            return
        doc = batch.get(INDEX, agg)
        if doc is None or not isinstance(event, c.AccountRefreshed | c.ConnectionSaved):
            return
        spend, balance = event.spend_per_hour, event.balance
        low = balance is not None and spend > 0 and balance / spend < self.warning_hours
        if low == doc["low"]:
            return
        batch.put(INDEX, agg, {**doc, "low": low})
        if low and balance is not None:
            data = {
                "run_id": None,
                "balance": str(balance),
                "spend_per_hour": str(spend),
                "hours_left": str((balance / spend).quantize(Decimal("0.1"))),
                "detail": "the RunPod balance covers less than the warning period "
                "(BALANCE_WARNING_DAYS) at the account's current spend: add credit",
            }
            self._fan_out(batch, str(doc["org_id"]), event, position, [(BALANCE_LOW, data)])

    def _orphan(self, batch: ViewBatch, event: Any, position: int) -> None:
        agg = f"orphans:{id_text(event.originator_id)}"
        if isinstance(event, o.OrphanPodsOpened):
            batch.put(INDEX, agg, {"org_id": event.org_id})
            return
        index = batch.get(INDEX, agg)
        if index is None:
            return
        told: list[tuple[str, dict[str, Any]]] = []
        if isinstance(event, o.OrphanPodFound):
            told.append(
                (
                    POD_STILL_BILLING,
                    {
                        "run_id": event.run_id,
                        "pod_id": event.pod_id,
                        "pod_status": event.status,
                        "orphan": True,
                        "cost_per_hour": str(event.cost_per_hour),
                    },
                )
            )
        elif isinstance(event, o.OrphanTerminationFailed) and event.needs_manual:
            told.append(
                (
                    CLEANUP_NEEDS_MANUAL,
                    {"run_id": None, "pod_id": event.pod_id, "attempts": event.attempt},
                )
            )
        self._fan_out(batch, str(index["org_id"]), event, position, told)

    def _fan_out(
        self,
        batch: ViewBatch,
        org_id: str,
        event: Any,
        position: int,
        told: list[tuple[str, dict[str, Any]]],
    ) -> None:
        if not told:
            return
        subscribers = batch.get(INDEX, f"subscribers:{org_id}")
        if not subscribers or not subscribers["ids"]:
            return
        for endpoint_id in subscribers["ids"]:
            endpoint = batch.get(INDEX, f"endpoint:{endpoint_id}")
            if endpoint is None:
                continue
            for n, (kind, data) in enumerate(told):
                if kind not in endpoint["events"]:
                    continue
                key = delivery_key(endpoint_id, position, n)
                batch.put(
                    org_id,
                    key,
                    {
                        "id": key.removeprefix("delivery:"),
                        "endpoint_id": endpoint_id,
                        "event_id": event_id(position, n),
                        "type": kind,
                        "payload": {
                            "id": event_id(position, n),
                            "type": kind,
                            "created_at": iso(event.timestamp),
                            "organization_id": org_id,
                            "data": data,
                        },
                        "status": PENDING,
                        "attempts": 0,
                        "next_attempt_at": None,
                        "last_status_code": None,
                        "last_error": None,
                        "delivered_at": None,
                        "attempt_log": [],
                    },
                )
                waiting = pending_key(org_id, endpoint_id, position, n)
                batch.put(
                    INDEX,
                    waiting,
                    {
                        "org_id": org_id,
                        "endpoint_id": endpoint_id,
                        "key": key,
                        "pending": waiting,
                        "due": 0.0,
                    },
                )


# ---------------------------------------------------------------- sending


@dataclass(frozen=True)
class DeliveryPolicy:
    """How hard the deliverer tries (settings `WEBHOOK_*`, docs/configuration.md)."""

    backoff_base_s: float = 5.0
    backoff_max_s: float = 3600.0
    max_attempts: int = 12
    timeout_s: float = 10.0


def body_of(payload: Doc) -> bytes:
    """The bytes sent (and signed): compact JSON with sorted keys, the same on every attempt."""
    return json.dumps(payload, separators=(",", ":"), sort_keys=True).encode()


class Deliverer:
    """Sends due deliveries, one at a time, and records every attempt."""

    def __init__(
        self,
        store: ViewStore,
        vault: SecretVault,
        transport: Transport,
        policy: DeliveryPolicy | None = None,
        *,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.store, self.vault, self.transport = store, vault, transport
        self.policy = policy or DeliveryPolicy()
        self.wall = wall

    def due(self) -> list[Doc]:
        now = self.wall()
        return [
            doc
            for _key, doc in self.store.list(WEBHOOK_OUTBOX, INDEX, "pending:")
            if float(doc.get("due") or 0.0) <= now and float(doc.get("lease") or 0.0) <= now
        ]

    def by_endpoint(self) -> dict[str, list[Doc]]:
        """The due deliveries per endpoint, each endpoint's oldest first."""
        groups: dict[str, list[Doc]] = {}
        for pending in self.due():
            groups.setdefault(str(pending["endpoint_id"]), []).append(pending)
        return groups

    def run_once(self) -> int:
        """Attempt every delivery due now; returns how many were attempted."""
        return sum(self.endpoint_round(items) for items in self.by_endpoint().values())

    def endpoint_round(self, due: list[Doc], stop: threading.Event | None = None) -> int:
        """Attempt one endpoint's due deliveries in order until one fails (the rest wait for a
        later round: an endpoint that is down costs one timeout a round, not one per delivery);
        returns how many were attempted."""
        attempted = 0
        for pending in due:
            if stop is not None and stop.is_set():
                break
            outcome = self.attempt(
                str(pending["org_id"]), str(pending["key"]), str(pending["pending"])
            )
            if outcome is None:
                continue
            attempted += 1
            if outcome != DELIVERED:
                break
        return attempted

    def _claim(self, org_id: str, key: str, pending_key: str) -> tuple[Doc, Doc] | None:
        """Lease the delivery to this sender for longer than one attempt can take; None when
        it is settled, not due, or another sender holds it."""
        now = self.wall()
        with self.store.batch(WEBHOOK_OUTBOX) as b:
            pending, doc = b.get(INDEX, pending_key), b.get(org_id, key)
            if pending is None or doc is None:
                return None
            if float(pending.get("due") or 0) > now or float(pending.get("lease") or 0) > now:
                return None
            endpoint = b.get(INDEX, f"endpoint:{doc['endpoint_id']}")
            if endpoint is None or doc["status"] != PENDING:
                doc["status"] = doc["status"] if doc["status"] != PENDING else CANCELLED
                b.put(org_id, key, doc)
                b.delete(INDEX, pending_key)
                return None
            # A sender that dies mid-attempt holds it no longer than an attempt could last.
            b.put(INDEX, pending_key, {**pending, "lease": now + self.policy.timeout_s + 5})
            return doc, endpoint

    def attempt(self, org_id: str, key: str, pending_key: str) -> str | None:
        """One attempt of one delivery: its status after it (delivered, pending for a retry,
        failed), or None when there was nothing to attempt."""
        claimed = self._claim(org_id, key, pending_key)
        if claimed is None:
            return None
        doc, endpoint = claimed
        body = body_of(doc["payload"])
        started = self.wall()
        code: int | None = None
        error: str | None = None
        try:
            secret = self.vault.get(org_id, vault_name(str(doc["endpoint_id"])))
        except SecretUnavailable:
            secret = None
            error = "the endpoint's secret is no longer in the vault"
        if secret is not None:
            headers = {
                "Content-Type": "application/json",
                "User-Agent": "Tensorant-Webhooks/1",
                SIGNATURE_HEADER: signature_header(secret, int(started), body),
                EVENT_ID_HEADER: str(doc["event_id"]),
                IDEMPOTENCY_HEADER: str(doc["event_id"]),
                "Tensorant-Event-Type": str(doc["type"]),
            }
            try:
                code = self.transport.post(
                    str(endpoint["url"]), body, headers, self.policy.timeout_s
                )
            except DeliveryFailed as e:
                error = str(e)[:300]
            except Exception as e:  # a sender bug must not stop the other deliveries
                log.exception("webhook delivery %s failed unexpectedly", key)
                error = type(e).__name__
        return self._record(org_id, key, pending_key, started, code, error, final=secret is None)

    def _record(
        self,
        org_id: str,
        key: str,
        pending_key: str,
        started: float,
        code: int | None,
        error: str | None,
        *,
        final: bool,
    ) -> str | None:
        now = self.wall()
        ok = code is not None and 200 <= code < 300
        if code is not None and not ok:
            error = f"the endpoint answered HTTP {code}"
        with self.store.batch(WEBHOOK_OUTBOX) as b:
            pending, doc = b.get(INDEX, pending_key), b.get(org_id, key)
            if doc is None:
                return None
            attempts = int(doc["attempts"]) + 1
            entry = {
                "at": stamp(started),
                "status_code": code,
                "error": None if ok else error,
                "duration_ms": round((now - started) * 1000),
            }
            doc.update(
                attempts=attempts,
                last_status_code=code,
                last_error=None if ok else error,
                attempt_log=[*doc["attempt_log"], entry][-_KEPT_ATTEMPTS:],
            )
            if pending is None and doc["status"] != PENDING:
                pass  # another sender settled it while this attempt outlived its lease
            elif ok:
                doc.update(status=DELIVERED, delivered_at=stamp(now), next_attempt_at=None)
                b.delete(INDEX, pending_key)
            elif final or attempts >= self.policy.max_attempts:
                doc.update(status=FAILED, next_attempt_at=None)
                b.delete(INDEX, pending_key)
            else:
                wait = backoff_seconds(
                    attempts, self.policy.backoff_base_s, self.policy.backoff_max_s
                )
                doc["next_attempt_at"] = stamp(now + wait)
                waiting = pending or {
                    "org_id": org_id,
                    "endpoint_id": doc["endpoint_id"],
                    "key": key,
                    "pending": pending_key,
                }
                b.put(INDEX, pending_key, {**waiting, "due": now + wait, "lease": 0.0})
            b.put(org_id, key, doc)
        if not ok:
            log.info(
                "webhook delivery %s attempt %d: %s", key, doc["attempts"], error or "no answer"
            )
        return str(doc["status"])


def deliveries(views: ViewStore, org_id: str, endpoint_id: str, limit: int = 100) -> list[Doc]:
    """An endpoint's latest deliveries, newest first (their keys count down)."""
    found = views.list(WEBHOOK_OUTBOX, org_id, f"delivery:{endpoint_id}:", limit=limit)
    return [doc for _key, doc in found]


class WebhookDispatch:
    """Runs the `webhook_outbox` projector and the deliverer on threads: start/stop. Where the
    outbox relay runs (the embedded `serve`, every `tensorant projector`).

    Endpoints are served side by side (`PARALLEL_ENDPOINTS` at a time), each endpoint's
    deliveries one at a time in order: a receiver that hangs holds one thread, never another
    organization's deliveries."""

    PARALLEL_ENDPOINTS = 4

    def __init__(
        self,
        app: Application[Any],
        store: ViewStore,
        deliverer: Deliverer,
        *,
        poll_interval: float = 0.5,
        balance_warning_days: float = 7.0,
    ) -> None:
        self.projector = Projector(app, store, WebhookOutbox(balance_warning_days))
        self.deliverer = deliverer
        self.poll_interval = poll_interval
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._busy: set[str] = set()
        self._lock = threading.Lock()

    def _round(self, endpoint_id: str, due: list[Doc]) -> None:
        try:
            self.deliverer.endpoint_round(due, self._stop)
        except Exception:
            log.exception("webhook deliveries to endpoint %s failed; trying again", endpoint_id)
        finally:
            with self._lock:
                self._busy.discard(endpoint_id)

    def _deliver_forever(self) -> None:
        with ThreadPoolExecutor(self.PARALLEL_ENDPOINTS, thread_name_prefix="webhooks") as pool:
            while not self._stop.is_set():
                try:
                    groups = self.deliverer.by_endpoint()
                except Exception:
                    log.exception("reading due webhook deliveries failed; trying again")
                    groups = {}
                for endpoint_id, due in groups.items():
                    with self._lock:
                        if endpoint_id in self._busy:
                            continue
                        self._busy.add(endpoint_id)
                    pool.submit(self._round, endpoint_id, due)
                self._stop.wait(self.poll_interval)

    def start(self) -> WebhookDispatch:
        if self._threads:
            return self
        self._stop.clear()
        self._threads = [
            threading.Thread(
                target=self.projector.run_forever,
                args=(self._stop, self.poll_interval),
                name="webhooks:outbox",
                daemon=True,
            ),
            threading.Thread(target=self._deliver_forever, name="webhooks:send", daemon=True),
        ]
        for t in self._threads:
            t.start()
        return self

    def stop(self, timeout: float = 15.0) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout)
        self._threads = []
