"""Hourly charge rows (B1, B3, B4) from the billing view: our estimate, then RunPod's bill.

Every usage segment is split at UTC hour boundaries (end exclusive) and at rate changes
(`domain.rates` effective dates). A row's `list_cost` is our estimate. Where RunPod has billed
the resource's hour, `billed_cost` is RunPod's amount, shared among that hour's rows in
proportion to their estimates, and `estimated` is False; otherwise `billed_cost` is the
estimate and `estimated` is True.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from domain.rates import HOURS_PER_MONTH, RATES, rates_at
from domain.times import parse_iso
from projections.store.base import Doc

HOUR = timedelta(hours=1)
ZERO = Decimal(0)
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600

# charge -> (service category, description, pricing unit)
GPU, CONTAINER_DISK, VOLUME_DISK_RUNNING, VOLUME_DISK_STOPPED = (
    "gpu",
    "container_disk",
    "volume_disk_running",
    "volume_disk_stopped",
)
NETWORK_VOLUME, NETWORK_VOLUME_OVER_1TB, PROVIDER_ONLY = (
    "network_volume",
    "network_volume_over_1tb",
    "provider_only",
)


def floor_hour(t: datetime) -> datetime:
    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)


def seconds(start: datetime, end: datetime) -> Decimal:
    td = end - start
    return Decimal(td.days * 86400 + td.seconds) + Decimal(td.microseconds) / 1_000_000


@dataclass(frozen=True, slots=True)
class ChargeRow:
    """One resource's charge of one kind within one UTC hour (end exclusive).

    Slotted: a FOCUS export reads every attribute of up to millions of these, column by column.
    """

    org_id: str
    resource_kind: str  # pod | network_volume
    resource_id: str
    resource_name: str
    charge: str
    start: datetime  # the charge period: the UTC hour
    end: datetime
    quantity: Decimal  # in `unit`
    unit: str  # Hours | GB-Months
    unit_price: Decimal  # list price per unit
    list_cost: Decimal  # our estimate
    billed_cost: Decimal
    estimated: bool
    run_id: str | None = None
    project_id: str | None = None
    datacenter_id: str | None = None
    gpu_type_id: str | None = None
    gpu_count: int = 0
    size_gb: int = 0

    @property
    def hour_key(self) -> tuple[str, str, datetime]:
        return self.resource_kind, self.resource_id, self.start


def _pieces(start: datetime, end: datetime) -> Iterator[tuple[datetime, datetime]]:
    """[start, end) split at UTC hours and at rate effective dates."""
    cuts = sorted({r.effective_from for r in RATES if start < r.effective_from < end})
    t = start
    while t < end:
        nxt = min([floor_hour(t) + HOUR, end, *[c for c in cuts if c > t]])
        yield t, nxt
        t = nxt


def _clip(seg: Doc, lo: datetime, hi: datetime, now: datetime) -> tuple[datetime, datetime] | None:
    start = max(parse_iso(seg["start"]), lo)
    end = min(parse_iso(seg["end"]) if seg["end"] else now, hi, now)
    return (start, end) if end > start else None


def pod_rows(org_id: str, pod: Doc, lo: datetime, hi: datetime, now: datetime) -> list[ChargeRow]:
    """Estimated rows of one Pod within [lo, hi)."""
    rows: list[ChargeRow] = []
    base = _pod_base(org_id, pod)
    for seg in pod["segments"]:
        span = _clip(seg, lo, hi, now)
        if span is None:
            continue
        for a, b in _pieces(*span):
            rows += _pod_piece(base, pod, seg, a, b)
    return [row for row in rows if row.quantity > 0]


def _pod_base(org_id: str, pod: Doc) -> dict[str, Any]:
    return {
        "org_id": org_id,
        "resource_kind": "pod",
        "resource_id": pod["pod_id"],
        "resource_name": pod["pod_name"],
        "run_id": pod["run_id"],
        "project_id": pod["project_id"],
        "datacenter_id": pod["datacenter_id"],
        "gpu_type_id": pod["gpu_type_id"],
        "gpu_count": pod["gpu_count"] or 0,
    }


def _pod_piece(
    base: dict[str, Any], pod: Doc, seg: Doc, a: datetime, b: datetime
) -> list[ChargeRow]:
    """The rows of one piece [a, b) of a Pod's segment (within one UTC hour and one rate)."""
    secs, rates = seconds(a, b), rates_at(a)
    hour = floor_hour(a)
    if seg["state"] != "running":
        return [
            _disk(base, VOLUME_DISK_STOPPED, hour, secs, pod["volume_gb"], rates.volume_disk_stopped)
        ]
    price = Decimal(seg["cost_per_hour"])
    return [
        _row(base, GPU, hour, secs / 3600, "Hours", price),
        _disk(base, CONTAINER_DISK, hour, secs, pod["container_gb"], rates.container_disk_running),
        _disk(base, VOLUME_DISK_RUNNING, hour, secs, pod["volume_gb"], rates.volume_disk_running),
    ]


def volume_rows(
    org_id: str, volume: Doc, lo: datetime, hi: datetime, now: datetime
) -> list[ChargeRow]:
    """Estimated rows of one network volume within [lo, hi): tiered $/GB-month."""
    rows: list[ChargeRow] = []
    base = _volume_base(org_id, volume)
    for seg in volume["segments"]:
        span = _clip(seg, lo, hi, now)
        if span is None:
            continue
        for a, b in _pieces(*span):
            rows += _volume_piece(base, volume, seg, a, b)
    return [row for row in rows if row.quantity > 0]


def _volume_base(org_id: str, volume: Doc) -> dict[str, Any]:
    return {
        "org_id": org_id,
        "resource_kind": "network_volume",
        "resource_id": volume["volume_id"],
        "resource_name": volume["volume_id"],
        "datacenter_id": volume["datacenter_id"],
    }


def _volume_piece(
    base: dict[str, Any], volume: Doc, seg: Doc, a: datetime, b: datetime
) -> list[ChargeRow]:
    """The rows of one piece [a, b) of a network volume's segment."""
    secs, rates = seconds(a, b), rates_at(a)
    size = int(seg["size_gb"])
    tier1 = min(size, rates.network_volume_tier1_limit_gb)
    tier2 = max(size - rates.network_volume_tier1_limit_gb, 0)
    extra = {**base, "size_gb": size}
    hour = floor_hour(a)
    return [
        _disk(extra, NETWORK_VOLUME, hour, secs, tier1, rates.network_volume_tier1),
        _disk(extra, NETWORK_VOLUME_OVER_1TB, hour, secs, tier2, rates.network_volume_tier2),
    ]


def _row(
    base: dict[str, Any], charge: str, hour: datetime, qty: Decimal, unit: str, price: Decimal
) -> ChargeRow:
    cost = qty * price
    return ChargeRow(
        charge=charge,
        start=hour,
        end=hour + HOUR,
        quantity=qty,
        unit=unit,
        unit_price=price,
        list_cost=cost,
        billed_cost=cost,
        estimated=True,
        **base,
    )


def _disk(
    base: dict[str, Any], charge: str, hour: datetime, secs: Decimal, gb: int, per_gb_month: Decimal
) -> ChargeRow:
    return _row(
        base, charge, hour, Decimal(gb) * secs / SECONDS_PER_MONTH, "GB-Months", per_gb_month
    )


def merge_hours(rows: list[ChargeRow]) -> list[ChargeRow]:
    """One row per (resource, charge, hour, unit price): pieces of the same hour add up."""
    merged: dict[tuple[Any, ...], ChargeRow] = {}
    for row in rows:
        k = (row.resource_kind, row.resource_id, row.charge, row.start, row.unit_price)
        prev = merged.get(k)
        merged[k] = (
            row
            if prev is None
            else replace(
                prev,
                quantity=prev.quantity + row.quantity,
                list_cost=prev.list_cost + row.list_cost,
                billed_cost=prev.billed_cost + row.billed_cost,
            )
        )
    return list(merged.values())


def apply_bills(
    rows: list[ChargeRow],
    bills: dict[tuple[str, str, datetime], Decimal],
    names: dict[tuple[str, str], ChargeRow],
) -> list[ChargeRow]:
    """Replace estimates by RunPod's amounts where RunPod billed the resource's hour."""
    by_hour: dict[tuple[str, str, datetime], list[ChargeRow]] = defaultdict(list)
    for row in rows:
        by_hour[row.hour_key].append(row)
    out: list[ChargeRow] = []
    for key, group in by_hour.items():
        amount = bills.get(key)
        if amount is None:
            out.extend(group)
            continue
        estimate = sum((g.list_cost for g in group), ZERO)
        if estimate == 0:
            out.extend(replace(g, billed_cost=ZERO, estimated=False) for g in group)
            if amount:
                out.append(_provider_only(group[0], amount))
            continue
        shares = [amount * g.list_cost / estimate for g in group]
        shares[-1] = amount - sum(shares[:-1], ZERO)  # the hour adds up exactly
        out.extend(
            replace(g, billed_cost=s, estimated=False) for g, s in zip(group, shares, strict=True)
        )
    seen = set(by_hour)
    for key, amount in bills.items():
        template = names.get(key[:2])
        if key not in seen and amount and template is not None:
            out.append(_provider_only(replace(template, start=key[2], end=key[2] + HOUR), amount))
    return out


def _provider_only(template: ChargeRow, amount: Decimal) -> ChargeRow:
    """RunPod billed an hour we estimated at zero: the row carries only the bill."""
    return replace(
        template,
        charge=PROVIDER_ONLY,
        quantity=ZERO,
        unit_price=ZERO,
        list_cost=ZERO,
        billed_cost=amount,
        estimated=False,
    )


def charge_rows(
    store: Any, view: str, org_id: str, lo: datetime, hi: datetime, now: datetime
) -> list[ChargeRow]:
    """Every charge row of an organization within [lo, hi), bills applied, in a stable order."""
    hi = min(hi, now) if now > lo else hi
    estimated: list[ChargeRow] = []
    names: dict[tuple[str, str], ChargeRow] = {}
    for _, pod in store.list(view, org_id, "pod:"):
        rows = pod_rows(org_id, pod, lo, hi, now)
        estimated += rows
        if rows:
            names[("pod", pod["pod_id"])] = rows[0]
    for _, vol in store.list(view, org_id, "volume:"):
        rows = volume_rows(org_id, vol, lo, hi, now)
        estimated += rows
        if rows:
            names[("network_volume", vol["volume_id"])] = rows[0]
    bills = {
        (b["kind"], b["resource_id"], parse_iso(b["start"])): Decimal(b["amount"])
        for _, b in store.list(view, org_id, "bill:")
        if lo <= parse_iso(b["start"]) < hi
    }
    rows = apply_bills(merge_hours(estimated), bills, names)
    return sorted(
        rows, key=lambda x: (x.start, x.resource_kind, x.resource_id, x.charge, x.unit_price)
    )
