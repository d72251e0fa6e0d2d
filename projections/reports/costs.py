"""Cost reports for the API and the CLI: grouped costs and export files for one organization."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from domain.errors import DomainError
from domain.rates import cents
from domain.times import iso, parse_iso
from projections.reports.charges import (
    ChargeColumns,
    ChargeRow,
    charge_columns,
    charge_rows,
    row_order,
    serverless_rows,
)
from projections.reports.focus import focus_bytes, group_lines, summary_csv
from projections.views.billing import BILLING

FORMATS = {
    "focus-csv": ("text/csv", "csv"),
    "focus-parquet": ("application/vnd.apache.parquet", "parquet"),
    "csv": ("text/csv", "csv"),
}
GROUPS = ("run", "resource", "day")


class InvalidReport(DomainError):
    problem = "invalid-report"
    title = "The report request is not valid"


def parse_when(value: str | None, default: datetime) -> datetime:
    """ISO 8601 date or time; naive means UTC."""
    if not value:
        return default
    try:
        return parse_iso(value)
    except ValueError:
        raise InvalidReport(f"{value!r} is not an ISO 8601 date or time") from None


def period(start: str | None, end: str | None, now: datetime) -> tuple[datetime, datetime]:
    """[from, to), defaulting to the current UTC month up to now."""
    month = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    lo, hi = parse_when(start, month), parse_when(end, now)
    if hi <= lo:
        raise InvalidReport("`to` must be after `from`")
    return lo, hi


def account_of(views: Any, org_id: str) -> dict[str, str]:
    """The FOCUS billing account (the RunPod account) and sub-account (the organization)."""
    from projections.views.connections import CONNECTIONS
    from projections.views.identity import ORGANIZATIONS

    compute = views.get(CONNECTIONS, org_id, "compute") or {}
    org = views.get(ORGANIZATIONS, org_id, "organization") or {}
    account = compute.get("account_id") or f"tensorant:{org_id}"
    return {
        "billing_account_id": account,
        "billing_account_name": f"RunPod account {account}",
        "org_name": org.get("name") or org_id,
    }


def rows_for(views: Any, org_id: str, lo: datetime, hi: datetime, now: datetime) -> list[ChargeRow]:
    rows = charge_rows(views, BILLING, org_id, lo, hi, now)
    serving = serverless_rows(views, BILLING, org_id, lo, min(hi, now))
    return sorted(rows + serving, key=row_order) if serving else rows


def costs(
    views: Any, org_id: str, lo: datetime, hi: datetime, now: datetime, group_by: str
) -> dict[str, Any]:
    """`GET /v1/billing/costs`: {currency, total, lines} (money as decimal strings)."""
    if group_by not in GROUPS:
        raise InvalidReport(f"group_by must be one of {', '.join(GROUPS)}")
    rows = rows_for(views, org_id, lo, hi, now)
    total = sum((r.billed_cost for r in rows), Decimal(0))
    estimate = sum((r.list_cost for r in rows), Decimal(0))
    return {
        "currency": "USD",
        "total": str(cents(total)),
        "estimate": str(cents(estimate)),
        "from": iso(lo),
        "to": iso(hi),
        "group_by": group_by,
        "estimated": any(r.estimated for r in rows),
        "lines": group_lines(rows, group_by),
    }


def export(
    views: Any, org_id: str, lo: datetime, hi: datetime, now: datetime, fmt: str
) -> tuple[bytes, str, str]:
    """(file bytes, media type, file name) for `focus-csv`, `focus-parquet` or `csv`."""
    if fmt not in FORMATS:
        raise InvalidReport(f"format must be one of {', '.join(FORMATS)}")
    if fmt == "csv":
        body = summary_csv(rows_for(views, org_id, lo, hi, now))
    else:  # FOCUS: the charges as columns, no Python object per row
        charges = charge_columns(views, BILLING, org_id, lo, hi, now)
        serving = serverless_rows(views, BILLING, org_id, lo, min(hi, now))
        if serving:  # V3: RunPod's serving hours beside the Pods' (rare: rows, not columns)
            charges = ChargeColumns.of_rows(sorted(charges.rows() + serving, key=row_order))
        body = focus_bytes(charges, account_of(views, org_id), fmt)
    media, ext = FORMATS[fmt]
    kind = "summary" if fmt == "csv" else "focus"
    name = f"tensorant-costs-{kind}-{lo:%Y%m%dT%H%M}-{hi:%Y%m%dT%H%M}.{ext}"
    return body, media, name
