"""RunPod's side of the money: per-second charge segments and the queries over them.

Month length: storage prices are quoted per GB-month; the sandbox uses a 730-hour month
(365 days x 24 h / 12), the usual cloud-billing convention, so $0.07/GB-month is
$0.07/730 per GB-hour.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal, getcontext
from typing import Literal

getcontext().prec = 40

HOURS_PER_MONTH = Decimal(730)
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600
CONTAINER_DISK_GB_MONTH = Decimal("0.10")  # running only
VOLUME_DISK_GB_MONTH_RUNNING = Decimal("0.10")
VOLUME_DISK_GB_MONTH_STOPPED = Decimal("0.20")
NETWORK_VOLUME_GB_MONTH = Decimal("0.07")  # first 1,000 GB
NETWORK_VOLUME_GB_MONTH_OVER_1TB = Decimal("0.05")

Category = Literal["gpu", "cpu", "container_disk", "volume_disk", "network_volume"]
ResourceKind = Literal["pod", "network_volume", "serverless"]


def seconds_between(start: datetime, end: datetime) -> Decimal:
    td = end - start
    return Decimal(td.days * 86400 + td.seconds) + Decimal(td.microseconds) / Decimal(1_000_000)


def network_volume_hourly(size_gb: int) -> Decimal:
    first = min(size_gb, 1000)
    above = max(size_gb - 1000, 0)
    return (
        Decimal(first) * NETWORK_VOLUME_GB_MONTH + Decimal(above) * NETWORK_VOLUME_GB_MONTH_OVER_1TB
    ) / HOURS_PER_MONTH


def cents(amount: Decimal) -> Decimal:
    return amount.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


@dataclass
class Charge:
    """A constant-rate stretch of one resource's charges; amount over [start, end)."""

    kind: ResourceKind
    resource_id: str
    category: Category
    start: datetime
    end: datetime
    rate_per_second: Decimal

    @property
    def amount(self) -> Decimal:
        return self.rate_per_second * seconds_between(self.start, self.end)

    def amount_within(self, start: datetime, end: datetime) -> Decimal:
        lo, hi = max(start, self.start), min(end, self.end)
        if hi <= lo:
            return Decimal(0)
        return self.rate_per_second * seconds_between(lo, hi)


class Ledger:
    """Append-only charge segments; adjacent equal-rate segments merge to keep it small.

    Not thread-safe on its own: the model's lock guards it.
    """

    def __init__(self) -> None:
        self.charges: list[Charge] = []
        self._last: dict[tuple[str, str, str], Charge] = {}
        self.total = Decimal(0)

    def add(
        self,
        kind: ResourceKind,
        resource_id: str,
        category: Category,
        *,
        start: datetime,
        end: datetime,
        rate_per_second: Decimal,
    ) -> Decimal:
        if end <= start or rate_per_second == 0:
            return Decimal(0)
        key = (kind, resource_id, category)
        last = self._last.get(key)
        amount = rate_per_second * seconds_between(start, end)
        if last is not None and last.end == start and last.rate_per_second == rate_per_second:
            last.end = end
        else:
            charge = Charge(kind, resource_id, category, start, end, rate_per_second)
            self.charges.append(charge)
            self._last[key] = charge
        self.total += amount
        return amount

    def amounts(
        self, start: datetime, end: datetime
    ) -> dict[tuple[ResourceKind, str], dict[Category, Decimal]]:
        """Per resource, per category, the amount charged within [start, end)."""
        out: dict[tuple[ResourceKind, str], dict[Category, Decimal]] = defaultdict(
            lambda: defaultdict(Decimal)
        )
        for charge in self.charges:
            part = charge.amount_within(start, end)
            if part or (charge.start < end and charge.end > start):
                out[(charge.kind, charge.resource_id)][charge.category] += part
        return out

    def amounts_per_bucket(
        self, window: list[tuple[datetime, datetime]], kind: ResourceKind | None = None
    ) -> list[dict[tuple[ResourceKind, str], dict[Category, Decimal]]]:
        """`amounts` of each of the contiguous, ordered buckets of `window` (of one `kind`),
        in one pass over the charges: a bill in hours over days asked `amounts` once per
        bucket, each over every tenant's charges (the scale bench's thousand organizations
        made that most of the sandbox's CPU)."""
        out: list[dict[tuple[ResourceKind, str], dict[Category, Decimal]]] = [
            defaultdict(lambda: defaultdict(Decimal)) for _ in window
        ]
        if not window:
            return out
        starts = [b0 for b0, _ in window]
        first, last = window[0][0], window[-1][1]
        for charge in self.charges:
            if (kind is not None and charge.kind != kind) or not (
                charge.start < last and charge.end > first
            ):
                continue
            i = max(0, bisect.bisect_right(starts, charge.start) - 1)
            while i < len(window) and window[i][0] < charge.end:
                b0, b1 = window[i]
                part = charge.amount_within(b0, b1)
                if part or (charge.start < b1 and charge.end > b0):
                    out[i][(charge.kind, charge.resource_id)][charge.category] += part
                i += 1
        return out


BucketSize = Literal["hour", "day", "week", "month", "year"]
BUCKET_SIZES: tuple[str, ...] = ("hour", "day", "week", "month", "year")


def snap_down(t: datetime, bucket: str) -> datetime:
    """Start of the UTC bucket holding t (weeks start on Monday: ISO, an inference)."""
    t = t.astimezone(UTC)
    if bucket == "hour":
        return t.replace(minute=0, second=0, microsecond=0)
    day = t.replace(hour=0, minute=0, second=0, microsecond=0)
    if bucket == "day":
        return day
    if bucket == "week":
        return day - timedelta(days=day.weekday())
    if bucket == "month":
        return day.replace(day=1)
    if bucket == "year":
        return day.replace(month=1, day=1)
    raise ValueError(f"bucketSize must be one of {', '.join(BUCKET_SIZES)}")


def next_boundary(t: datetime, bucket: str) -> datetime:
    """Start of the bucket after the one starting at t (t must be bucket-aligned)."""
    if bucket == "hour":
        return t + timedelta(hours=1)
    if bucket == "day":
        return t + timedelta(days=1)
    if bucket == "week":
        return t + timedelta(days=7)
    if bucket == "month":
        return t.replace(year=t.year + t.month // 12, month=t.month % 12 + 1)
    return t.replace(year=t.year + 1)


def snap_up(t: datetime, bucket: str) -> datetime:
    down = snap_down(t, bucket)
    return down if down == t.astimezone(UTC) else next_boundary(down, bucket)


def buckets(start: datetime, end: datetime, bucket: str) -> list[tuple[datetime, datetime]]:
    out = []
    cur = snap_down(start, bucket)
    while cur < end:
        nxt = next_boundary(cur, bucket)
        out.append((cur, nxt))
        cur = nxt
    return out
