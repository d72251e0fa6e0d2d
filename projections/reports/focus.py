"""Cost reports (B3): FOCUS 1.2 CSV and Parquet, a plain CSV summary, and grouped totals.

FOCUS rows are the hourly charge rows of `projections.reports.charges` (ChargePeriod = one UTC hour,
end exclusive). BilledCost is RunPod's amount where RunPod has billed that hour, else our
estimate, which `x_Estimated` says. ListCost is always our estimate at list price.
"""

from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from projections.reports.charges import (
    CONTAINER_DISK,
    GPU,
    NETWORK_VOLUME,
    NETWORK_VOLUME_OVER_1TB,
    PROVIDER_ONLY,
    SERVERLESS_COMPUTE,
    UNPRICED,
    VOLUME_DISK_RUNNING,
    VOLUME_DISK_STOPPED,
    ChargeColumns,
    ChargeRow,
)
from projections.store.engine import bulk_gc

CURRENCY = "USD"
MONEY_PLACES = Decimal("0.0000000001")  # 1e-10 USD: per-row precision, sums stay exact to the cent

DESCRIPTIONS = {
    GPU: "GPU Pod compute at the Pod's costPerHr (per second)",
    CONTAINER_DISK: "Container disk of a running Pod ($/GB-month)",
    VOLUME_DISK_RUNNING: "Volume disk of a running Pod ($/GB-month)",
    VOLUME_DISK_STOPPED: "Volume disk of a stopped Pod ($/GB-month)",
    NETWORK_VOLUME: "Network volume storage, first 1,000 GB ($/GB-month)",
    NETWORK_VOLUME_OVER_1TB: "Network volume storage above 1,000 GB ($/GB-month)",
    PROVIDER_ONLY: "Billed by RunPod for an hour Tensorant estimated at zero",
    SERVERLESS_COMPUTE: "Serverless endpoint workers (managed serving), as RunPod billed the hour",
}
# FOCUS: each ServiceName has exactly one ServiceCategory and one ServiceSubcategory.
SERVICES = {
    "compute": ("RunPod GPU Pods", "Compute", "Virtual Machines"),
    "pod_storage": ("RunPod Pod Storage", "Storage", "Block Storage"),
    "network_volume": ("RunPod Network Volumes", "Storage", "File Storage"),
    "serverless": ("RunPod Serverless", "AI and Machine Learning", "Generative AI"),
}
RESOURCE_TYPES = {
    "pod": "GPU Pod",
    "network_volume": "Network Volume",
    "serverless": "Serverless Endpoint",
}


def _service(row: ChargeRow) -> tuple[str, str, str]:
    if row.resource_kind in ("network_volume", "serverless"):
        return SERVICES[row.resource_kind]
    if row.charge in (GPU, PROVIDER_ONLY):
        return SERVICES["compute"]
    return SERVICES["pod_storage"]


FOCUS_COLUMNS: list[tuple[str, pa.DataType]] = [
    ("AvailabilityZone", pa.string()),
    ("BilledCost", pa.decimal128(38, 10)),
    ("BillingAccountId", pa.string()),
    ("BillingAccountName", pa.string()),
    ("BillingAccountType", pa.string()),
    ("BillingCurrency", pa.string()),
    ("BillingPeriodEnd", pa.timestamp("s", tz="UTC")),
    ("BillingPeriodStart", pa.timestamp("s", tz="UTC")),
    ("CapacityReservationId", pa.string()),
    ("CapacityReservationStatus", pa.string()),
    ("ChargeCategory", pa.string()),
    ("ChargeClass", pa.string()),
    ("ChargeDescription", pa.string()),
    ("ChargeFrequency", pa.string()),
    ("ChargePeriodEnd", pa.timestamp("s", tz="UTC")),
    ("ChargePeriodStart", pa.timestamp("s", tz="UTC")),
    ("CommitmentDiscountCategory", pa.string()),
    ("CommitmentDiscountId", pa.string()),
    ("CommitmentDiscountName", pa.string()),
    ("CommitmentDiscountQuantity", pa.decimal128(38, 10)),
    ("CommitmentDiscountStatus", pa.string()),
    ("CommitmentDiscountType", pa.string()),
    ("CommitmentDiscountUnit", pa.string()),
    ("ConsumedQuantity", pa.decimal128(38, 10)),
    ("ConsumedUnit", pa.string()),
    ("ContractedCost", pa.decimal128(38, 10)),
    ("ContractedUnitPrice", pa.decimal128(38, 10)),
    ("EffectiveCost", pa.decimal128(38, 10)),
    ("InvoiceId", pa.string()),
    ("InvoiceIssuerName", pa.string()),
    ("ListCost", pa.decimal128(38, 10)),
    ("ListUnitPrice", pa.decimal128(38, 10)),
    ("PricingCategory", pa.string()),
    ("PricingCurrency", pa.string()),
    ("PricingQuantity", pa.decimal128(38, 10)),
    ("PricingUnit", pa.string()),
    ("ProviderName", pa.string()),
    ("PublisherName", pa.string()),
    ("RegionId", pa.string()),
    ("RegionName", pa.string()),
    ("ResourceId", pa.string()),
    ("ResourceName", pa.string()),
    ("ResourceType", pa.string()),
    ("ServiceCategory", pa.string()),
    ("ServiceName", pa.string()),
    ("ServiceSubcategory", pa.string()),
    ("SkuId", pa.string()),
    ("SkuMeter", pa.string()),
    ("SkuPriceDetails", pa.string()),
    ("SkuPriceId", pa.string()),
    ("SubAccountId", pa.string()),
    ("SubAccountName", pa.string()),
    ("SubAccountType", pa.string()),
    ("Tags", pa.string()),
    ("x_RunId", pa.string()),
    ("x_ProjectId", pa.string()),
    ("x_OrganizationId", pa.string()),
    ("x_Estimated", pa.bool_()),
    ("x_GpuTypeId", pa.string()),
    ("x_GpuCount", pa.int32()),
]
FOCUS_SCHEMA = pa.schema(FOCUS_COLUMNS)


def _m(value: Decimal) -> Decimal:
    return value.quantize(MONEY_PLACES)


def _billing_period(t: datetime) -> tuple[datetime, datetime]:
    start = t.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    end = start.replace(year=start.year + start.month // 12, month=start.month % 12 + 1)
    return start, end


def focus_record(row: ChargeRow, account: dict[str, str]) -> dict[str, Any]:
    """One FOCUS 1.2 row; `account` has billing_account_id/name and org_name."""
    period_start, period_end = _billing_period(row.start)
    service, category, subcategory = _service(row)
    sku = f"runpod:{row.charge}" + (f":{row.gpu_type_id}" if row.charge == GPU else "")
    tags = {
        k: v
        for k, v in (
            ("tensorant:organization_id", row.org_id),
            ("tensorant:run_id", row.run_id),
            ("tensorant:project_id", row.project_id),
        )
        if v
    }
    has_price = row.charge not in UNPRICED
    return {
        "AvailabilityZone": None,
        "BilledCost": _m(row.billed_cost),
        "BillingAccountId": account["billing_account_id"],
        "BillingAccountName": account["billing_account_name"],
        "BillingAccountType": "RunPod Account",
        "BillingCurrency": CURRENCY,
        "BillingPeriodEnd": period_end,
        "BillingPeriodStart": period_start,
        "CapacityReservationId": None,
        "CapacityReservationStatus": None,
        "ChargeCategory": "Usage",
        "ChargeClass": None,
        "ChargeDescription": DESCRIPTIONS[row.charge],
        "ChargeFrequency": "Usage-Based",
        "ChargePeriodEnd": row.end,
        "ChargePeriodStart": row.start,
        "CommitmentDiscountCategory": None,
        "CommitmentDiscountId": None,
        "CommitmentDiscountName": None,
        "CommitmentDiscountQuantity": None,
        "CommitmentDiscountStatus": None,
        "CommitmentDiscountType": None,
        "CommitmentDiscountUnit": None,
        "ConsumedQuantity": _m(row.quantity) if has_price else None,
        "ConsumedUnit": row.unit if has_price else None,
        "ContractedCost": _m(row.billed_cost),
        "ContractedUnitPrice": _m(row.unit_price) if has_price else None,
        "EffectiveCost": _m(row.billed_cost),
        # RunPod is prepaid and issues no invoices: a provisional statement id per month.
        "InvoiceId": f"{account['billing_account_id']}:{period_start:%Y-%m}",
        "InvoiceIssuerName": "RunPod",
        "ListCost": _m(row.list_cost),
        "ListUnitPrice": _m(row.unit_price) if has_price else None,
        "PricingCategory": "Standard" if has_price else None,
        "PricingCurrency": CURRENCY,
        "PricingQuantity": _m(row.quantity) if has_price else None,
        "PricingUnit": row.unit if has_price else None,
        "ProviderName": "RunPod",
        "PublisherName": "RunPod",
        "RegionId": row.datacenter_id,
        "RegionName": row.datacenter_id,
        "ResourceId": row.resource_id,
        "ResourceName": row.resource_name,
        "ResourceType": RESOURCE_TYPES[row.resource_kind],
        "ServiceCategory": category,
        "ServiceName": service,
        "ServiceSubcategory": subcategory,
        "SkuId": sku if has_price else None,
        "SkuMeter": row.charge if has_price else None,
        "SkuPriceDetails": None,
        "SkuPriceId": f"{sku}@{row.unit_price}" if has_price else None,
        "SubAccountId": row.org_id,
        "SubAccountName": account["org_name"],
        "SubAccountType": "Organization",
        "Tags": json.dumps(tags, sort_keys=True, separators=(",", ":")),
        "x_RunId": row.run_id,
        "x_ProjectId": row.project_id,
        "x_OrganizationId": row.org_id,
        "x_Estimated": row.estimated,
        "x_GpuTypeId": row.gpu_type_id,
        "x_GpuCount": row.gpu_count or None,
    }


_TS = pa.timestamp("s", tz="UTC")
_MONEY = pa.decimal128(38, 10)
# FOCUS columns that depend only on these attributes of a row (plus the account), computed once
# per distinct combination: (charge, resource_kind, gpu_type_id, unit_price as written, unit,
# org_id, run_id, project_id).
_GROUPED = (
    "ChargeDescription",
    "ConsumedUnit",
    "PricingCategory",
    "PricingUnit",
    "ResourceType",
    "ServiceCategory",
    "ServiceName",
    "ServiceSubcategory",
    "SkuId",
    "SkuMeter",
    "SkuPriceId",
    "Tags",
)
# Columns whose value is the same on every row (the account's, or fixed).
_CONSTANT = (
    "AvailabilityZone",
    "BillingAccountId",
    "BillingAccountName",
    "BillingAccountType",
    "BillingCurrency",
    "CapacityReservationId",
    "CapacityReservationStatus",
    "ChargeCategory",
    "ChargeClass",
    "ChargeFrequency",
    "CommitmentDiscountCategory",
    "CommitmentDiscountId",
    "CommitmentDiscountName",
    "CommitmentDiscountQuantity",
    "CommitmentDiscountStatus",
    "CommitmentDiscountType",
    "CommitmentDiscountUnit",
    "InvoiceIssuerName",
    "PricingCurrency",
    "ProviderName",
    "PublisherName",
    "SkuPriceDetails",
    "SubAccountName",
    "SubAccountType",
)


def _dict_encode(values: pa.Array) -> pa.DictionaryArray:
    out = pc.dictionary_encode(values)
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def _key_codes(values: pa.Array) -> tuple[pa.Array, int]:
    """(an int64 code per value, equal values equal codes, null its own code; how many codes)."""
    encoded = _dict_encode(values)
    size = len(encoded.dictionary)
    return pc.fill_null(encoded.indices.cast(pa.int64()), size), size + 1


def _group_codes(columns: list[pa.Array]) -> pa.Array:
    """One int32 code per row for the combination of `columns` (equal rows, equal codes)."""
    key, _ = _key_codes(columns[0])
    for column in columns[1:]:
        codes, size = _key_codes(column)
        key, _ = _key_codes(pc.add(pc.multiply(key, size), codes))
    return key.cast(pa.int32())


def _first_rows(codes: pa.Array, size: int) -> list[int]:
    """For each code 0..size-1, the index of a row that has it."""
    if size == 0:
        return []
    grouped = (
        pa.table({"g": codes, "i": pa.array(range(len(codes)), pa.int64())})
        .group_by("g", use_threads=False)
        .aggregate([("i", "min")])
    )
    first = [0] * size
    for g, i in zip(
        grouped.column("g").to_pylist(), grouped.column("i_min").to_pylist(), strict=True
    ):
        first[g] = i
    return first


def _masked(mask: pa.Array, values: pa.Array) -> pa.Array:
    """`values` where `mask` is true, else null."""
    return pc.if_else(mask, values, pa.scalar(None, values.type))


def focus_table(rows: Iterable[ChargeRow] | ChargeColumns, account: dict[str, str]) -> pa.Table:
    """The FOCUS table of charge rows, built column by column (equal to one `focus_record` a row).

    Rows given as `ChargeRow` objects are first turned into columns (`ChargeColumns.of_rows`);
    the export passes `charges.charge_columns` directly. Grouping, de-duplication and everything
    derived from a few attributes run in Arrow compute: the derived values are computed once per
    distinct combination (by `focus_record` on one row of it), then taken into place.
    """
    with bulk_gc():
        charges = rows if isinstance(rows, ChargeColumns) else ChargeColumns.of_rows(list(rows))
        return next(_focus_batches(charges, account, max(len(charges), 1)))


# Rows per table of `focus_batches`: big enough that Arrow's per-call costs and Parquet's
# per-row-group overhead stay small (a row group per batch: 3.0 MB at 1M rows where one row
# group is 2.6 MB; 8,192-49,152 rows were no faster), small enough (~60 MB of FOCUS columns)
# that each batch reuses memory the previous one has just freed.
BATCH_ROWS = 65_536


def focus_batches(charges: ChargeColumns, account: dict[str, str]) -> Iterator[pa.Table]:
    """`focus_table(charges)` as consecutive tables of at most BATCH_ROWS rows.

    Why: a whole table is ~900 bytes a row (908 MB at 1M rows), and much of its build time can be
    the first touch of that much fresh memory (pyarrow's allocator returns freed pages to the OS
    within milliseconds, so every export may pay it again; most on a busy machine). Built,
    written and dropped one batch at a time, the export touches tens of MB, reused from batch to
    batch. The columns that do not depend on the charge period are still computed once, per
    distinct row.
    """
    return _focus_batches(charges, account, BATCH_ROWS)


def _focus_batches(
    charges: ChargeColumns, account: dict[str, str], size: int
) -> Iterator[pa.Table]:
    n = len(charges)
    if n == 0:
        yield pa.Table.from_arrays(
            [pa.nulls(0, typ) for _, typ in FOCUS_COLUMNS], schema=FOCUS_SCHEMA
        )
        return
    fixed, first = _per_distinct_row(charges, account)
    # The columns with one value on every row, made once and sliced for each batch.
    types = dict(FOCUS_COLUMNS)
    longest = min(size, n)
    constant = {
        name: pa.nulls(longest, types[name])
        if first[name] is None
        else pa.repeat(pa.scalar(first[name], types[name]), longest)
        for name in _CONSTANT
    }
    # The charge period's length per distinct row, in microseconds.
    distinct = charges.distinct
    length = pc.subtract(distinct["end"].cast(pa.int64()), distinct["start"].cast(pa.int64()))
    length = length.combine_chunks()
    for lo in range(0, n, size):
        which = charges.which.slice(lo, size)
        start = charges.start.slice(lo, size)
        yield _rows(fixed, constant, length, which, start, account)


def _rows(
    fixed: dict[str, pa.Array],
    constant: dict[str, pa.Array],
    length: pa.Array,
    which: pa.Array,
    start: pa.Array,
    account: dict[str, str],
) -> pa.Table:
    """The FOCUS table of the rows `which` (distinct rows) starting at `start`."""
    taken: dict[int, pa.Array] = {}  # columns that share an array take it once
    columns: dict[str, pa.Array] = {}
    for name, column in fixed.items():
        if id(column) not in taken:
            taken[id(column)] = column.take(which)
        columns[name] = taken[id(column)]
    for name, column in constant.items():
        columns[name] = column.slice(0, len(which))

    # The charge period, and the billing period and invoice per distinct charge period start.
    starts = start.cast(_TS, safe=False)
    columns["ChargePeriodStart"] = starts
    columns["ChargePeriodEnd"] = (
        pc.add(start.cast(pa.int64()), length.take(which)).cast(start.type).cast(_TS, safe=False)
    )
    distinct_starts = pc.unique(starts)
    by_start = pc.index_in(starts, value_set=distinct_starts)
    periods = [_billing_period(t) for t in distinct_starts.to_pylist()]
    columns["BillingPeriodStart"] = pa.array([p[0] for p in periods], _TS).take(by_start)
    columns["BillingPeriodEnd"] = pa.array([p[1] for p in periods], _TS).take(by_start)
    columns["InvoiceId"] = pa.array(
        [f"{account['billing_account_id']}:{p[0]:%Y-%m}" for p in periods], pa.string()
    ).take(by_start)
    return pa.Table.from_arrays([columns[name] for name, _ in FOCUS_COLUMNS], schema=FOCUS_SCHEMA)


def _per_distinct_row(
    charges: ChargeColumns, account: dict[str, str]
) -> tuple[dict[str, pa.Array], dict[str, Any]]:
    """The FOCUS columns that do not depend on the charge period, one entry per distinct row.

    Also the `focus_record` of one row, for the columns that are the same on every row.
    """
    types = dict(FOCUS_COLUMNS)

    def column(name: str) -> pa.Array:
        return charges.distinct.column(name).combine_chunks()

    charge, kinds, gpu_types = column("charge"), column("resource_kind"), column("gpu_type_id")
    units, orgs = column("unit"), column("org_id")
    runs, projects = column("run_id"), column("project_id")
    # Money: each distinct Decimal (as written) rounded once, then taken into place by code.
    money = pa.array([_m(v) for v in charges.money], _MONEY)
    price_codes = column("unit_price")

    # Columns of a few attributes: one representative row per distinct combination.
    by_group = _group_codes([charge, kinds, gpu_types, price_codes, units, orgs, runs, projects])
    firsts = _first_rows(by_group, int(pc.max(by_group).as_py()) + 1)
    representatives = charges.distinct_rows(firsts)
    records = [focus_record(row, account) for row in representatives]
    has_price = pa.array([row.charge not in UNPRICED for row in representatives], pa.bool_()).take(
        by_group
    )
    columns: dict[str, pa.Array] = {}
    for name in _GROUPED:
        columns[name] = pa.array([r[name] for r in records], types[name]).take(by_group)

    billed = money.take(column("billed_cost"))
    columns["BilledCost"] = columns["ContractedCost"] = columns["EffectiveCost"] = billed
    columns["ListCost"] = money.take(column("list_cost"))
    quantity = _masked(has_price, money.take(column("quantity")))
    columns["ConsumedQuantity"] = columns["PricingQuantity"] = quantity
    unit_price = _masked(has_price, money.take(price_codes))
    columns["ContractedUnitPrice"] = columns["ListUnitPrice"] = unit_price

    region = column("datacenter_id")
    gpu_count = column("gpu_count").cast(pa.int32())
    columns.update(
        {
            "RegionId": region,
            "RegionName": region,
            "ResourceId": column("resource_id"),
            "ResourceName": column("resource_name"),
            "SubAccountId": orgs,
            "x_OrganizationId": orgs,
            "x_RunId": runs,
            "x_ProjectId": projects,
            "x_Estimated": column("estimated"),
            "x_GpuTypeId": gpu_types,
            "x_GpuCount": _masked(pc.not_equal(gpu_count, 0), gpu_count),
        }
    )
    return columns, records[0]


def write_focus_parquet(table: pa.Table, sink: Any) -> None:
    write_focus_parquet_batches([table], sink)


def write_focus_parquet_batches(tables: Iterable[pa.Table], sink: Any) -> None:
    """One Parquet file (zstd); each table becomes its own row group(s).

    A single table gives exactly `pq.write_table(table, sink, compression="zstd")`.
    """
    writer = None
    for table in tables:
        if writer is None:
            writer = pq.ParquetWriter(sink, table.schema, compression="zstd")
        writer.write_table(table)
    if writer is not None:
        writer.close()


def write_focus_csv(table: pa.Table, sink: Any) -> None:
    """ISO 8601 UTC times with Z; nulls are empty fields."""
    write_focus_csv_batches([table], sink)


def write_focus_csv_batches(tables: Iterable[pa.Table], sink: Any) -> None:
    """One CSV file, one header line: the same bytes as `write_focus_csv` of the tables joined."""
    _write_csv_texts(map(_csv_text, tables), sink)


def _write_csv_texts(texts: Iterable[pa.Table], sink: Any) -> None:
    """`write_focus_csv_batches` of tables whose times are already texts (`_csv_text`)."""
    writer = None
    for text in texts:
        if writer is None:
            writer = pacsv.CSVWriter(
                sink, text.schema, write_options=pacsv.WriteOptions(quoting_style="needed")
            )
        writer.write_table(text)
    if writer is not None:
        writer.close()


def _csv_text(table: pa.Table) -> pa.Table:
    """`table` with its timestamps as ISO 8601 UTC texts ending in Z."""
    out = table
    for name, typ in FOCUS_COLUMNS:
        if pa.types.is_timestamp(typ):
            col = out.column(name)
            # Few distinct times (hours): format each once, then look the texts up.
            distinct = pc.unique(col)
            text = pc.strftime(distinct, format="%Y-%m-%dT%H:%M:%SZ").take(
                pc.index_in(col, value_set=distinct)
            )
            out = out.set_column(out.schema.get_field_index(name), name, text)
    return out


def focus_bytes(
    rows: Iterable[ChargeRow] | ChargeColumns, account: dict[str, str], fmt: str
) -> bytes:
    """The FOCUS file as bytes (`focus-csv` or `focus-parquet`), built and written in batches.

    Parquet gets a row group per batch (BATCH_ROWS rows); the CSV is the same bytes as one table
    written at once.
    """
    buf = pa.BufferOutputStream()
    with bulk_gc():
        charges = rows if isinstance(rows, ChargeColumns) else ChargeColumns.of_rows(list(rows))
        batches = focus_batches(charges, account)
        if fmt == "focus-parquet":
            write_focus_parquet_batches(built_ahead(batches), buf)
        else:  # the times formatted by the helper too
            _write_csv_texts(built_ahead(map(_csv_text, batches)), buf)
    return bytes(buf.getvalue().to_pybytes())


def built_ahead(tables: Iterator[pa.Table]) -> Iterator[pa.Table]:
    """`tables`, each next one built by a helper thread while the caller writes this one.

    pyarrow releases the GIL while it takes a batch's columns into place and while it writes a
    batch, and its writers use one thread: built in turn, one core waited for the other. At most
    one batch is built ahead, so at most two are held."""
    with ThreadPoolExecutor(1, thread_name_prefix="focus-batch") as helper:
        ahead = helper.submit(next, tables, None)
        while (table := ahead.result()) is not None:
            ahead = helper.submit(next, tables, None)
            yield table


# ---------------------------------------------------------------- plain summaries

SUMMARY_FIELDS = [
    "kind",
    "id",
    "run_id",
    "project_id",
    "resource_type",
    "charge_hours",
    "estimated_cost",
    "billed_cost",
    "estimated_rows",
    "currency",
]


def group_lines(rows: Iterable[ChargeRow], group_by: str) -> list[dict[str, Any]]:
    """Totals per run, per resource or per UTC day (money as decimal strings, cents)."""
    acc: dict[str, dict[str, Any]] = defaultdict(
        lambda: {
            "estimated_cost": Decimal(0),
            "billed_cost": Decimal(0),
            "estimated_rows": 0,
            "hours": set(),
        }
    )
    for r in rows:
        if group_by == "run":
            key, extra = (
                r.run_id or f"storage:{r.resource_id}",
                {"run_id": r.run_id, "project_id": r.project_id},
            )
        elif group_by == "day":
            key, extra = r.start.date().isoformat(), {"day": r.start.date().isoformat()}
        else:
            key, extra = (
                f"{r.resource_kind}:{r.resource_id}",
                {
                    "resource_kind": r.resource_kind,
                    "resource_id": r.resource_id,
                    "run_id": r.run_id,
                    "project_id": r.project_id,
                },
            )
        a = acc[key]
        a.update(extra)
        a["estimated_cost"] += r.list_cost
        a["billed_cost"] += r.billed_cost
        a["estimated_rows"] += int(r.estimated)
        a["hours"].add((r.resource_id, r.start))
    lines = []
    for key in sorted(acc):
        a = acc[key]
        hours = a.pop("hours")
        lines.append(
            {
                "key": key,
                **a,
                "charge_hours": len(hours),
                "estimated_cost": str(cents(a["estimated_cost"])),
                "billed_cost": str(cents(a["billed_cost"])),
                "cost": str(cents(a["billed_cost"])),
                "estimated": a["estimated_rows"] > 0,
            }
        )
    return lines


def cents(value: Decimal) -> Decimal:
    from domain.rates import cents as _cents

    return _cents(value)


def summary_csv(rows: list[ChargeRow]) -> bytes:
    """The plain CSV: one line per run and one per resource."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(SUMMARY_FIELDS)
    for kind, group_by in (("run", "run"), ("resource", "resource")):
        for line in group_lines(rows, group_by):
            rtype = line.get("resource_kind", "")
            w.writerow(
                [
                    kind,
                    line["key"],
                    line.get("run_id") or "",
                    line.get("project_id") or "",
                    rtype,
                    line["charge_hours"],
                    line["estimated_cost"],
                    line["billed_cost"],
                    line["estimated_rows"],
                    CURRENCY,
                ]
            )
    return buf.getvalue().encode()
