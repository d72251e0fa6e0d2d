"""Hourly charge rows (B1, B3, B4) from the billing view: our estimate, then RunPod's bill.

Every usage segment is split at UTC hour boundaries (end exclusive) and at rate changes
(`domain.rates` effective dates). A row's `list_cost` is our estimate. Where RunPod has billed
the resource's hour, `billed_cost` is RunPod's amount, shared among that hour's rows in
proportion to their estimates, and `estimated` is False; otherwise `billed_cost` is the
estimate and `estimated` is True.

`charge_rows` is the row-by-row definition (one `ChargeRow` per row). `charge_columns` gives the
same rows as Arrow columns (`ChargeColumns`) for the FOCUS export: a stretch of whole hours of
one segment repeats the same values hour after hour, so it computes each stretch's rows once
and repeats them in Arrow, with no Python object per row.
"""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import partial
from itertools import accumulate, pairwise
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson

from domain.rates import HOURS_PER_MONTH, RATES, rates_at
from domain.times import parse_iso
from projections.store.base import Doc
from projections.views.billing import bill_hours

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
# V3: a managed-serving endpoint's hour as RunPod billed it (we keep no estimate of our own).
SERVERLESS_COMPUTE = "serverless_compute"
UNPRICED = (PROVIDER_ONLY, SERVERLESS_COMPUTE)  # rows that carry only RunPod's amount


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
            _disk(
                base, VOLUME_DISK_STOPPED, hour, secs, pod["volume_gb"], rates.volume_disk_stopped
            )
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
        (b["kind"], b["resource_id"], parse_iso(start)): Decimal(amount)
        for _, b in store.list(view, org_id, "bill:")
        for start, _, amount in bill_hours(b)
        if lo <= parse_iso(start) < hi
    }
    rows = apply_bills(merge_hours(estimated), bills, names)
    return sorted(
        rows, key=lambda x: (x.start, x.resource_kind, x.resource_id, x.charge, x.unit_price)
    )


def serverless_rows(
    store: Any, view: str, org_id: str, lo: datetime, hi: datetime
) -> list[ChargeRow]:
    """V3: RunPod's recorded hours of the organization's serving endpoints within [lo, hi);
    the bill is both the list and the billed cost (no estimate of ours)."""
    out: list[ChargeRow] = []
    for _, b in store.list(view, org_id, "bill:serverless:"):
        for start, end, amount in bill_hours(b):
            at = parse_iso(start)
            if not lo <= at < hi:
                continue
            value = Decimal(str(amount))
            out.append(
                ChargeRow(
                    org_id=org_id,
                    resource_kind="serverless",
                    resource_id=str(b["resource_id"]),
                    resource_name=str(b["resource_id"]),
                    charge=SERVERLESS_COMPUTE,
                    start=at,
                    end=parse_iso(end) if end else at + HOUR,
                    quantity=ZERO,
                    unit="Hours",
                    unit_price=ZERO,
                    list_cost=value,
                    billed_cost=value,
                    estimated=False,
                )
            )
    return out


def row_order(row: ChargeRow) -> tuple[Any, ...]:
    return row.start, row.resource_kind, row.resource_id, row.charge, row.unit_price


# ---------------------------------------------------------------- column-wise (FOCUS export)

MONEY_FIELDS = ("quantity", "unit_price", "list_cost", "billed_cost")
_STRING_FIELDS = (
    "org_id",
    "resource_kind",
    "resource_id",
    "resource_name",
    "charge",
    "unit",
    "run_id",
    "project_id",
    "datacenter_id",
    "gpu_type_id",
)
_TIME = pa.timestamp("us", tz="UTC")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_HOUR_US = 3_600_000_000
# A resource's rows of one hour, repeated for that many consecutive hours (values equal but
# `start`/`end`, one hour later each time).
Block = tuple[list[ChargeRow], int]


@dataclass(frozen=True)
class ChargeColumns:
    """Charge rows as columns: distinct rows, and for each row which one it repeats and when.

    `distinct` has one column per `ChargeRow` field: strings, `start`/`end` (of the distinct
    row's first hour) as UTC microsecond timestamps, `estimated`, `gpu_count`, `size_gb`, and the
    money fields as int32 codes into `money`, the distinct Decimals as computed (by text: 1.64
    and 1.640 are two entries, since FOCUS prints a unit price as written). Row i is
    `distinct[which[i]]` with its period moved to start at `start[i]` (a whole number of hours
    later). Everything but the charge period is thus computed once per distinct row.
    """

    distinct: pa.Table
    which: pa.Array  # int32, one per row
    start: pa.Array  # timestamp[us, UTC], one per row
    money: list[Decimal]

    def __len__(self) -> int:
        return len(self.which)

    def rows(self) -> list[ChargeRow]:
        table = self.distinct.take(self.which)
        moved = pc.subtract(self.start.cast(pa.int64()), table["start"].cast(pa.int64()))
        end = pc.add(table["end"].cast(pa.int64()), moved).cast(_TIME)
        for name, column in (("start", self.start), ("end", end)):
            table = table.set_column(table.schema.get_field_index(name), name, column)
        return [self._row(values) for values in table.to_pylist()]

    def distinct_rows(self, indices: list[int]) -> list[ChargeRow]:
        """Rows of `distinct` (each with its first hour)."""
        return [self._row(values) for values in self.distinct.take(indices).to_pylist()]

    def _row(self, values: dict[str, Any]) -> ChargeRow:
        for name in MONEY_FIELDS:
            values[name] = self.money[values[name]]
        return ChargeRow(**values)

    @classmethod
    def of_rows(cls, rows: Sequence[ChargeRow]) -> ChargeColumns:
        """The columns of these rows, in their order."""
        return _columns(
            [[row] for row in rows],
            _positions(len(rows)).cast(pa.int32()),
            pa.array([_micros(row.start) for row in rows], pa.int64()),
            sort=False,
        )


def charge_columns(
    store: Any, view: str, org_id: str, lo: datetime, hi: datetime, now: datetime
) -> ChargeColumns:
    """`charge_rows` as columns: the same rows in the same order (`ChargeColumns.rows()`).

    RunPod's bills are read at once (`_bill_columns`) and matched to the resources' hours in
    Arrow (`_with_bills`); bills that cannot be read that way go block by block (`_billed`).
    """
    hi = min(hi, now) if now > lo else hi
    resources = _resources(store, view, org_id, lo, hi, now)
    read = _bill_columns(store, view, org_id, lo, hi, resources)
    charges = None if read is None else _with_bills(resources, *read)
    if charges is not None:
        return charges
    bills = _bills_by_resource(store, view, org_id, lo, hi)
    repeated = [
        repeat
        for key, template, blocks in resources
        for repeat in _billed(template, blocks, bills.get(key, {}))
    ]
    return _columns(
        [[row] for row, _ in repeated],
        *_hours([_micros(row.start) for row, _ in repeated], [n for _, n in repeated]),
    )


# (kind, resource id), the template for hours billed with no rows of ours (its first row, as
# in `charge_rows`), its blocks with pieces of the same hour merged
Resource = tuple[tuple[str, str], ChargeRow, list[Block]]


def _resources(
    store: Any, view: str, org_id: str, lo: datetime, hi: datetime, now: datetime
) -> list[Resource]:
    """Every Pod and network volume with estimated rows within [lo, hi), as blocks."""
    out: list[Resource] = []
    for _, pod in store.list(view, org_id, "pod:"):
        piece = partial(_pod_piece, _pod_base(org_id, pod), pod)
        blocks = _blocks(pod["segments"], piece, lo, hi, now)
        if blocks:
            out.append((("pod", pod["pod_id"]), blocks[0][0][0], _merged(blocks)))
    for _, vol in store.list(view, org_id, "volume:"):
        piece = partial(_volume_piece, _volume_base(org_id, vol), vol)
        blocks = _blocks(vol["segments"], piece, lo, hi, now)
        if blocks:
            out.append((("network_volume", vol["volume_id"]), blocks[0][0][0], _merged(blocks)))
    return out


_STRETCH = pa.struct([("start", pa.string()), ("hours", pa.int64()), ("amount", pa.string())])
_BILL_FIELDS = pa.schema(
    [
        ("kind", pa.string()),
        ("resource_id", pa.string()),
        ("stretches", pa.list_(_STRETCH)),
    ]
)


def _bill_columns(
    store: Any, view: str, org_id: str, lo: datetime, hi: datetime, resources: list[Resource]
) -> tuple[pa.Table, list[Decimal]] | None:
    """RunPod's bills within [lo, hi) of the resources we have rows of, read with pyarrow's JSON
    reader, or None.

    The bill documents' stretches (`projections.views.billing`) as a table of `resource` (the
    index in `resources`), `hour` (the first billed hour within [lo, hi), in hours since 1970),
    `hours` (how many consecutive hours) and `amount` (an int32 code into the Decimals returned
    beside it, one per amount text). None when there are no bills, or where this would not read
    what `_bills_by_resource` reads: an amount that is not a JSON string, a start with no zone or
    not on a whole hour, a missing field (a document of one hour, the shape before stretches).
    """
    lines = store.list_json_lines(view, org_id, "bill:")
    if not lines:
        return None
    try:
        docs = pajson.read_json(
            io.BytesIO(lines),
            read_options=pajson.ReadOptions(use_threads=False),
            parse_options=pajson.ParseOptions(
                explicit_schema=_BILL_FIELDS, unexpected_field_behavior="ignore"
            ),
        ).combine_chunks()
        if any(column.null_count for column in docs.columns):
            return None
        stretches = docs.column("stretches").chunk(0)
        start, counts, amount = stretches.flatten().flatten()
        start = start.cast(_TIME).cast(pa.int64())
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        return None
    if any(column.null_count for column in (start, counts, amount)):
        return None
    first = pc.divide(start, _HOUR_US)
    if len(first) and not (
        pc.all(pc.equal(pc.multiply(first, _HOUR_US), start)).as_py()
        and pc.min(counts).as_py() >= 1
    ):
        return None
    resource = _resource_of(
        resources, docs.column("kind").chunk(0), docs.column("resource_id").chunk(0)
    ).take(pc.list_parent_indices(stretches))
    # The hours h with lo <= h * 1 h < hi.
    lo_hour, hi_hour = -(-_micros(lo) // _HOUR_US), -(-_micros(hi) // _HOUR_US)
    begin = pc.max_element_wise(first, lo_hour)
    end = pc.min_element_wise(pc.add(first, counts), hi_hour)
    amount = _dict_encoded(amount)
    table = pa.table(
        {
            "resource": resource,
            "hour": begin,
            "hours": pc.subtract(end, begin),
            "amount": amount.indices.cast(pa.int32()),
        }
    )
    table = table.filter(pc.and_(pc.is_valid(resource), pc.greater(end, begin)))
    return table, [Decimal(text) for text in amount.dictionary.to_pylist()]


def _dict_encoded(values: pa.ChunkedArray | pa.Array) -> pa.DictionaryArray:
    out = pc.dictionary_encode(values)
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def _resource_of(resources: list[Resource], kinds: pa.Array, ids: pa.Array) -> pa.Array:
    """The index in `resources` of each (kind, id), null for resources with no rows."""
    out = pa.nulls(len(ids), pa.int64())
    by_kind: dict[str, tuple[list[str], list[int]]] = defaultdict(lambda: ([], []))
    for r, ((kind, rid), _, _) in enumerate(resources):
        by_kind[kind][0].append(rid)
        by_kind[kind][1].append(r)
    for kind, (rids, indices) in by_kind.items():
        found = pa.array(indices, pa.int64()).take(
            pc.index_in(ids, value_set=pa.array(rids, pa.string()))
        )
        out = pc.if_else(pc.equal(kinds, kind), found, out)
    return out


def _with_bills(
    resources: list[Resource], bills: pa.Table, amounts: list[Decimal]
) -> ChargeColumns | None:
    """The resources' rows with RunPod's bills applied, stretch by stretch.

    Each resource's blocks and bill stretches are cut where either begins or ends (`_overlaid`);
    each distinct (block, amount) is priced once by `apply_bills`, and billed hours with no rows
    of ours get `charge_rows`' provider-only row (one per distinct (resource, amount)). None when
    two bills share a resource and hour.
    """
    stretches: list[list[tuple[int, int, int]]] = [[] for _ in resources]
    for r, hour, hours, a in zip(
        *(bills.column(n).to_pylist() for n in bills.column_names), strict=True
    ):
        stretches[r].append((hour, hour + hours, a))
    groups: list[list[ChargeRow]] = []
    group_of: dict[tuple[int, int, int], int] = {}  # (resource, block or -1, amount or -1)
    group, first, count = [], [], []
    for r, (_, template, merged) in enumerate(resources):
        blocks = sorted(
            (_micros(rows[0].start) // _HOUR_US, _micros(rows[0].start) // _HOUR_US + n, b)
            for b, (rows, n) in enumerate(merged)
        )
        billed = sorted(stretches[r])
        if any(y[0] < x[1] for x, y in pairwise(billed)):
            return None
        for hour, hours, b, a in _overlaid(blocks, billed):
            key = (r, -1 if b is None else b, -1 if a is None else a)
            g = group_of.get(key)
            if g is None:
                if b is not None:
                    rows = merged[b][0]
                    if a is not None:
                        rows = apply_bills(rows, {rows[0].hour_key: amounts[a]}, {})
                elif a is not None and amounts[a]:  # RunPod billed an hour we have no rows in
                    at = _EPOCH + hour * HOUR
                    rows = [_provider_only(replace(template, start=at, end=at + HOUR), amounts[a])]
                else:
                    continue
                g = group_of[key] = len(groups)
                groups.append(rows)
            group.append(g)
            first.append(hour * _HOUR_US)
            count.append(hours)
    piece, start = _hours(first, count)
    return _columns(groups, pa.array(group, pa.int32()).take(piece), start)


def _overlaid(
    blocks: list[tuple[int, int, int]], bills: list[tuple[int, int, int]]
) -> Iterator[tuple[int, int, int | None, int | None]]:
    """Two sorted lists of disjoint [begin, end) stretches with a payload each (a block, an
    amount), cut where any begins or ends: (begin, length, block or None, amount or None) for
    every piece covered by either."""
    bounds = sorted({x for begin, end, _ in (*blocks, *bills) for x in (begin, end)})
    i = j = 0
    for p, q in pairwise(bounds):
        while i < len(blocks) and blocks[i][1] <= p:
            i += 1
        while j < len(bills) and bills[j][1] <= p:
            j += 1
        block = blocks[i][2] if i < len(blocks) and blocks[i][0] <= p else None
        bill = bills[j][2] if j < len(bills) and bills[j][0] <= p else None
        if block is not None or bill is not None:
            yield p, q - p, block, bill


def _bills_by_resource(
    store: Any, view: str, org_id: str, lo: datetime, hi: datetime
) -> dict[tuple[str, str], dict[datetime, Decimal]]:
    """RunPod's amounts per (kind, resource id) and hour; one Decimal object per amount text."""
    out: dict[tuple[str, str], dict[datetime, Decimal]] = defaultdict(dict)
    amounts: dict[tuple[type, Any], Decimal] = {}
    for _, b in store.list(view, org_id, "bill:"):
        for at, _, text in bill_hours(b):
            start = parse_iso(at)
            if lo <= start < hi:
                amount = amounts.get((type(text), text))
                if amount is None:
                    amount = amounts[(type(text), text)] = Decimal(text)
                out[(b["kind"], b["resource_id"])][start] = amount
    return out


def _runs(start: datetime, end: datetime) -> Iterator[tuple[datetime, datetime, int]]:
    """`_pieces(start, end)` with each stretch of whole hours as one: (first piece, how many)."""
    cuts = sorted({r.effective_from for r in RATES if start < r.effective_from < end})
    for a, b in pairwise([start, *cuts, end]):
        t = a
        if t != floor_hour(t):
            nxt = min(floor_hour(t) + HOUR, b)
            yield t, nxt, 1
            t = nxt
        whole = (floor_hour(b) - t) // HOUR if t < b else 0
        if whole > 0:
            yield t, t + HOUR, whole
            t += whole * HOUR
        if t < b:
            yield t, b, 1


def _blocks(
    segments: list[Doc],
    piece: Callable[[Doc, datetime, datetime], list[ChargeRow]],
    lo: datetime,
    hi: datetime,
    now: datetime,
) -> list[Block]:
    """A resource's estimated rows within [lo, hi) as blocks, in `pod_rows`' order."""
    out: list[Block] = []
    for seg in segments:
        span = _clip(seg, lo, hi, now)
        if span is None:
            continue
        for a, b, count in _runs(*span):
            rows = [row for row in piece(seg, a, b) if row.quantity > 0]
            if rows:
                out.append((rows, count))
    return out


def _later(rows: list[ChargeRow], hours: int) -> list[ChargeRow]:
    if hours == 0:
        return rows
    shift = hours * HOUR
    return [replace(row, start=row.start + shift, end=row.end + shift) for row in rows]


def _merged(blocks: list[Block]) -> list[Block]:
    """`merge_hours` on a resource's blocks: hours with several pieces become one block each.

    A stretch of whole hours shares its hours with no other piece, as a resource's segments
    follow one another; should they overlap, every hour is merged row by row.
    """
    wide = [(rows, n) for rows, n in blocks if n > 1]
    single = [row for rows, n in blocks if n == 1 for row in rows]
    spans = sorted(
        [(rows[0].start, rows[0].start + n * HOUR) for rows, n in wide]
        + [(hour, hour + HOUR) for hour in {row.start for row in single}]
    )
    if any(b[0] < a[1] for a, b in pairwise(spans)):
        single = [row for rows, n in blocks for k in range(n) for row in _later(rows, k)]
        wide = []
    by_hour: dict[datetime, list[ChargeRow]] = defaultdict(list)
    for row in merge_hours(single):
        by_hour[row.start].append(row)
    return [(rows, 1) for rows in by_hour.values()] + wide


def _billed(
    template: ChargeRow, blocks: list[Block], bills: dict[datetime, Decimal]
) -> list[tuple[ChargeRow, int]]:
    """A resource's rows, each with how many consecutive hours it repeats for, bills applied.

    A block is split where the bill changes from one hour to the next (one amount object per
    amount text, see `_bills_by_resource`); `apply_bills` prices each part's first hour.
    """
    if not bills:
        return [(row, count) for rows, count in blocks for row in rows]
    out: list[tuple[ChargeRow, int]] = []
    billed_hours = 0
    for rows, count in blocks:
        first = rows[0].start
        k = 0
        while k < count:
            amount = bills.get(first + k * HOUR)
            j = k + 1
            while j < count and bills.get(first + j * HOUR) is amount:
                j += 1
            at = _later(rows, k)
            if amount is not None:
                billed_hours += j - k
                at = apply_bills(at, {at[0].hour_key: amount}, {})
            out += [(row, j - k) for row in at]
            k = j
    if billed_hours < len(bills):  # RunPod billed hours in which we have no rows
        covered = {rows[0].start + k * HOUR for rows, n in blocks for k in range(n)}
        for hour, amount in bills.items():
            if hour not in covered and amount:
                out.append(
                    (_provider_only(replace(template, start=hour, end=hour + HOUR), amount), 1)
                )
    return out


def _micros(t: datetime) -> int:
    return ((t if t.tzinfo else t.replace(tzinfo=UTC)) - _EPOCH) // _MICROSECOND


def _hours(first: list[int], counts: list[int]) -> tuple[pa.Array, pa.Array]:
    """Runs of consecutive hours (first start in µs, how many), hour by hour: (run, start)."""
    ends = list(accumulate(counts))
    run = _decode(pa.array(ends, pa.int64()), len(counts))
    run_first = pa.array([end - n for end, n in zip(ends, counts, strict=True)], pa.int64())
    hours = pc.subtract(_positions(ends[-1] if ends else 0), run_first.take(run))
    start = pc.add(pa.array(first, pa.int64()).take(run), pc.multiply(hours, _HOUR_US))
    return run, start


def _positions(n: int) -> pa.Array:
    """0, 1, ..., n - 1 (int64)."""
    return pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), n)), 1)


def _decode(ends: pa.Array, runs: int) -> pa.Array:
    """For each position, the index of the run it falls in (runs ending at `ends`, exclusive)."""
    values = _positions(runs).cast(pa.int32())
    return pc.run_end_decode(pa.RunEndEncodedArray.from_arrays(ends, values))


def _columns(
    groups: list[list[ChargeRow]], group: pa.Array, start: pa.Array, *, sort: bool = True
) -> ChargeColumns:
    """The rows of `groups[group[i]]` at hour `start[i]` (µs), for each i, as columns.

    A group is rows of one resource in one hour (they share their start); each row of each group
    is one distinct row. Unless `sort` is false, the rows are sorted as `charge_rows` sorts
    them: by start, then by the rank of (resource kind, id, charge, unit price).
    """
    rows = [row for rows in groups for row in rows]
    sizes = [len(rows) for rows in groups]
    # Expand each (group, start) entry into its group's rows.
    per_entry = pa.array(sizes, pa.int64()).take(group)
    ends = pc.cumulative_sum(per_entry)
    entry = _decode(ends, len(group))
    entry_first = pc.subtract(ends, per_entry).take(entry)
    group_first = pa.array(list(accumulate(sizes[:-1], initial=0)), pa.int64())
    local = pc.subtract(_positions(len(entry)), entry_first)
    which = pc.add(group_first.take(group).take(entry), local).cast(pa.int32())
    start = start.take(entry)
    if sort:
        keys = [(r.resource_kind, r.resource_id, r.charge, r.unit_price) for r in rows]
        rank = {key: i for i, key in enumerate(sorted(set(keys)))}
        ranks = pa.array([rank[key] for key in keys], pa.int32())
        order = pc.sort_indices(
            pa.table({"start": start, "rank": ranks.take(which)}),
            sort_keys=[("start", "ascending"), ("rank", "ascending")],
        )
        which, start = which.take(order), start.take(order)

    money: list[Decimal] = []
    money_codes: dict[str, int] = {}

    def codes(name: str) -> pa.Array:
        out = []
        for row in rows:
            value = getattr(row, name)
            code = money_codes.setdefault(str(value), len(money))
            if code == len(money):
                money.append(value)
            out.append(code)
        return pa.array(out, pa.int32())

    columns: dict[str, pa.Array] = {
        name: pa.array([getattr(row, name) for row in rows], pa.string()) for name in _STRING_FIELDS
    }
    columns.update({name: codes(name) for name in MONEY_FIELDS})
    columns["estimated"] = pa.array([row.estimated for row in rows], pa.bool_())
    columns["gpu_count"] = pa.array([row.gpu_count for row in rows], pa.int64())
    columns["size_gb"] = pa.array([row.size_gb for row in rows], pa.int64())
    columns["start"] = pa.array([_micros(row.start) for row in rows], pa.int64()).cast(_TIME)
    columns["end"] = pa.array([_micros(row.end) for row in rows], pa.int64()).cast(_TIME)
    distinct = pa.table({field.name: columns[field.name] for field in fields(ChargeRow)})
    return ChargeColumns(distinct, which, start.cast(_TIME), money)
