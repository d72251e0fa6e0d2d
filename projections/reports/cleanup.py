"""Cleanup status (K1, B2): every Pod that bills or may bill — run Pods running, retained,
terminating or needing manual cleanup, and orphans — with what each costs, and a warning while
the RunPod balance covers fewer days of it than the operator set."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Any

import domain.orphans as o
import domain.run as r
from domain.rates import per_hour, running_disk_per_hour, stopped_disk_per_hour
from domain.times import parse_iso
from projections.store.base import Doc
from projections.views.connections import CONNECTIONS
from projections.views.deployments import deployments, endpoint_cost, seen_endpoints
from projections.views.orphans import ORPHANS
from projections.views.runs import RUNS, costs

# Cleanup items of these kinds bill their Pod's price beside its storage.
BILLING_KINDS = ("running", "terminating", "needs_manual", "orphan")


def cleanup_status(
    views: Any,
    org_id: str,
    now: datetime,
    warning_days: float,
    runs: Callable[[], list[Doc]] | None = None,
) -> Doc:
    """`GET /v1/cleanup`: {items, balance_warning, balance, spend_per_hour}; `runs` reads the
    organization's run documents the caller wants counted (else all are read here). The
    orphans and the cards are asked for first: a store may send them with the runs' read
    (`ViewStore.one_connection`, one round trip for the three on PostgreSQL)."""
    orphans = views.list_later(ORPHANS, org_id, "pod:")
    asked_cards = views.get_many_later(CONNECTIONS, org_id, ("compute", "storage"))
    if runs is None:
        items = cleanup_items([doc for _, doc in views.list(RUNS, org_id, "run:")], now)
    else:
        items = cleanup_items(runs(), now)
    items += orphan_items([doc for _, doc in orphans()], now)
    items += serving_items(views, org_id)
    burn = Decimal(0)
    for item in items:
        burn += Decimal(item["storage_cost_per_hour"])
        if item["kind"] in BILLING_KINDS and item.get("price_per_hour"):
            burn += Decimal(item["price_per_hour"])
    cards = asked_cards()  # one read for both
    compute = cards.get("compute") or {}
    storage = cards.get("storage") or {}
    if storage.get("cost_per_month"):
        burn += per_hour(Decimal(storage["cost_per_month"]))
    balance = Decimal(compute["balance"]) if compute.get("balance") else None
    return {
        "items": items,
        "balance_warning": balance_warning(balance, burn, warning_days),
        "balance": compute.get("balance"),
        "spend_per_hour": compute.get("spend_per_hour"),
    }


def balance_warning(balance: Decimal | None, burn_per_hour: Decimal, days: float) -> str | None:
    """At $0 RunPod stops or terminates Pods: warn while there is still time to add credit."""
    if balance is None or burn_per_hour <= 0:
        return None
    hours = balance / burn_per_hour
    if hours >= Decimal(str(days)) * 24:
        return None
    return (
        f"the RunPod balance ${balance} covers about {hours:.1f} hours of the running Pods and "
        f"retained storage (${burn_per_hour:.4f}/hour); at $0 RunPod stops Pods with a network "
        "volume and terminates the others — add credit or release what you no longer need"
    )


CLEANUP_KIND = {
    r.POD_RUNNING: "running",
    r.POD_STOPPED: "retained",
    r.POD_TERMINATING: "terminating",
    r.POD_NEEDS_MANUAL: "needs_manual",
}


def cleanup_items(docs: list[Doc], now: datetime) -> list[Doc]:
    """K1: every Pod that bills or may bill, with what it costs."""
    items = []
    for doc in docs:
        kind = CLEANUP_KIND.get(doc["cleanup"]["pod_status"])
        if kind is None:
            continue
        _, cost, storage = costs(doc, now)
        items.append(
            {
                "kind": kind,
                "pod_id": doc["pod_id"],
                "run_id": doc["id"],
                "run_state": doc["state"],
                "since": doc["cleanup"]["since"],
                "cost_so_far": str(cost.quantize(Decimal("0.0001"))),
                "storage_cost_per_hour": str(storage.quantize(Decimal("0.000001"))),
                "price_per_hour": doc["price_per_hour"],
                "attempts": doc["cleanup"]["attempts"],
                "last_error": doc["cleanup"]["last_error"],
            }
        )
    return sorted(items, key=lambda i: (i["since"] or "", i["pod_id"] or ""))


def orphan_costs(doc: Doc, now: datetime) -> tuple[Decimal, Decimal, Decimal]:
    """(cost so far, storage cost per hour, compute price per hour); unknown bills as running."""
    start = parse_iso(doc["since"])
    end = parse_iso(doc["ended_at"]) if doc.get("ended_at") else now
    hours = Decimal(str(max((end - start).total_seconds(), 0))) / 3600
    disk = doc["disk"]
    if doc["status"] == "stopped":
        storage = stopped_disk_per_hour(disk["volume_gb"], start)
        price = Decimal(0)
    else:
        storage = running_disk_per_hour(disk["container_gb"], disk["volume_gb"], start)
        price = Decimal(doc["cost_per_hour"])
    return (price + storage) * hours, storage, price


def orphan_items(docs: list[Doc], now: datetime) -> list[Doc]:
    """K1: orphans still at RunPod (released or not), as cleanup items of kind `orphan`."""
    items = []
    for doc in docs:
        if doc["state"] not in o.ORPHAN_LIVE:
            continue
        cost, storage, price = orphan_costs(doc, now)
        items.append(
            {
                "kind": "orphan",
                "pod_id": doc["pod_id"],
                "run_id": doc["run_id"],
                "run_state": None,
                "since": doc["since"],
                "cost_so_far": str(cost.quantize(Decimal("0.0001"))),
                "storage_cost_per_hour": str(storage.quantize(Decimal("0.000001"))),
                "price_per_hour": str(price),
                "attempts": doc["attempts"],
                "last_error": doc["last_error"],
                "pod_status": doc["state"],
                "pod_name": doc["pod_name"],
            }
        )
    return sorted(items, key=lambda i: (i["since"] or "", i["pod_id"] or ""))


SERVING_WARNING = (
    "a Serverless endpoint with workers up or a minimum above zero: a worker bills per second "
    "while it answers, at the price per hour shown; idle workers scale to zero after the idle "
    "timeout; it is deleted with the last deployment of its base model"
)
ORPHAN_ENDPOINT_WARNING = (
    "a Serverless endpoint with Tensorant's naming that no deployment keeps: it may bill while "
    "workers run and RunPod may start workers on any request. Delete it in RunPod's console "
    "(Serverless > the endpoint > Manage > Delete Endpoint) if nothing of yours uses it; "
    "deploying the base model's adapter again adopts it instead"
)


def serving_items(views: Any, org_id: str) -> list[Doc]:
    """V3: every endpoint RunPod lists with our naming that bills or may: one a live
    deployment keeps (ready, deploying or deleting) while workers are up or its minimum is
    above zero, once per endpoint, with its price per hour and what RunPod billed for it so
    far; and every orphan (no deployment keeps it), whatever it runs."""
    by_endpoint: dict[str, list[Doc]] = {}
    for doc in deployments(views, org_id):
        if doc["state"] in ("ready", "deploying", "deleting") and doc.get("endpoint_id"):
            by_endpoint.setdefault(str(doc["endpoint_id"]), []).append(doc)
    items = []
    for seen in seen_endpoints(views, org_id):
        endpoint_id = str(seen["endpoint_id"])
        docs = by_endpoint.get(endpoint_id, [])
        orphan = bool(seen["orphan"]) and not docs
        if not orphan and not (docs and (seen["workers_up"] or seen["workers_min"])):
            continue
        items.append(
            {
                "kind": "orphan_endpoint" if orphan else "serving_endpoint",
                "pod_id": None,
                "endpoint_id": endpoint_id,
                "run_id": docs[0]["run_id"] if len(docs) == 1 else None,
                "run_state": None,
                "since": seen["since"],
                "cost_so_far": str(endpoint_cost(views, org_id, [endpoint_id])),
                "storage_cost_per_hour": "0",
                "price_per_hour": seen["price_per_hour"],
                "attempts": 0,
                "last_error": None,
                "pod_status": None,
                "pod_name": seen["name"],
                "workers_up": seen["workers_up"],
                "workers_min": seen["workers_min"],
                "warning": ORPHAN_ENDPOINT_WARNING if orphan else SERVING_WARNING,
            }
        )
    return items
