"""Billing as people read it (B1, B2): the month's charges grouped with column names in words,
money to the cent with the exact figure kept for a hover, runs named by their project and a
short id, and the cost of each day as the bars of an inline SVG chart. The figures are the
charges the API's `GET /v1/billing/costs` sums (`projections.reports.costs.rows_for`), before
its rounding to the cent, so a run costing $0.0012 shows as such on hover, not as $0.00."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from domain.rates import cents
from projections.reports.charges import ChargeRow
from projections.reports.costs import GROUPS, InvalidReport, period, rows_for
from projections.views.projects import PROJECTS

EXACT = Decimal("0.000001")
CHART_HEIGHT = 120
BAR = 20  # px per day in the chart's own units; the SVG scales to its box


@dataclass(frozen=True)
class Money:
    """An amount in USD: `shown` to the cent, `exact` (to the millionth of a dollar) for the
    hover; an amount above zero never shows as $0.00."""

    amount: Decimal

    @property
    def shown(self) -> str:
        if Decimal(0) < self.amount < Decimal("0.005"):
            return "<$0.01"
        return f"${cents(self.amount):,.2f}"

    @property
    def exact(self) -> str:
        text = f"{self.amount.quantize(EXACT).normalize():f}"
        whole, _, part = text.partition(".")
        return f"${int(whole):,}.{part.ljust(2, '0')}" if whole != "-0" else f"$0.{part}"


@dataclass
class Line:
    """One row of the table."""

    label: str
    href: str | None = None
    detail: str = ""
    estimate: Decimal = Decimal(0)
    billed: Decimal = Decimal(0)
    estimated_rows: int = 0
    rows: int = 0
    hours: set[tuple[str, datetime]] = field(default_factory=set)

    def add(self, r: ChargeRow) -> None:
        self.estimate += r.list_cost
        self.billed += r.billed_cost
        self.estimated_rows += int(r.estimated)
        self.rows += 1
        self.hours.add((r.resource_id, r.start))

    @property
    def source(self) -> str:
        if self.estimated_rows == 0:
            return "RunPod's bill"
        return "Our estimate" if self.estimated_rows == self.rows else "Partly our estimate"

    @property
    def money(self) -> tuple[Money, Money]:
        return Money(self.estimate), Money(self.billed)


@dataclass(frozen=True)
class Bar:
    x: int
    y: int
    height: int
    day: date
    cost: Money


@dataclass
class Report:
    group_by: str
    lo: datetime
    hi: datetime
    total: Money
    estimate: Money
    estimated: bool
    lines: list[Line]
    bars: list[Bar]
    chart_width: int
    highest: Money


def run_name(projects: dict[str, str], project_id: str | None, run_id: str) -> str:
    """ "support-bot · 1a2b3c4d": the run's project and the start of its id."""
    project = projects.get(project_id or "", "a deleted project")
    return f"{project} · {run_id[:8]}"


def resource_name(r: ChargeRow) -> str:
    if r.resource_kind == "network_volume":
        return f"Network volume {r.resource_id}"
    return f"Pod {r.resource_id}"


def _lines(rows: Iterable[ChargeRow], group_by: str, projects: dict[str, str]) -> list[Line]:
    found: dict[str, Line] = {}
    for r in rows:
        run = run_name(projects, r.project_id, r.run_id) if r.run_id else ""
        href = f"/runs/{r.run_id}" if r.run_id else None
        if group_by == "day":
            key = r.start.date().isoformat()
            line = found.setdefault(key, Line(f"{r.start:%a} {r.start.day} {r.start:%b %Y}"))
        elif group_by == "resource":
            key = f"{r.resource_kind}:{r.resource_id}"
            line = found.setdefault(key, Line(resource_name(r), href, run))
        elif r.run_id:
            key = r.run_id
            line = found.setdefault(key, Line(run, href, resource_name(r)))
        else:  # storage that belongs to no run: the network volume
            key = f"~{r.resource_id}"
            line = found.setdefault(
                key, Line(resource_name(r), None, "Kept whether or not a run uses it")
            )
        line.add(r)
    return [found[k] for k in sorted(found)]


def _bars(rows: list[ChargeRow], lo: datetime, hi: datetime) -> tuple[list[Bar], Decimal]:
    per_day: dict[date, Decimal] = defaultdict(Decimal)
    for r in rows:
        per_day[r.start.date()] += r.billed_cost
    first, last = lo.date(), (hi - timedelta(microseconds=1)).date()
    days = [first + timedelta(days=i) for i in range((last - first).days + 1)]
    highest = max((per_day[d] for d in days), default=Decimal(0))
    bars = []
    for i, d in enumerate(days):
        cost = per_day[d]
        h = int(cost / highest * (CHART_HEIGHT - 20)) if highest > 0 else 0
        h = max(h, 1) if cost > 0 else 0
        bars.append(Bar(i * BAR + 2, CHART_HEIGHT - 16 - h, h, d, Money(cost)))
    return bars, highest


def report(views: Any, org_id: str, now: datetime, group_by: str) -> Report:
    """This month's charges up to now, grouped by run, resource or day."""
    if group_by not in GROUPS:
        raise InvalidReport(f"group_by must be one of {', '.join(GROUPS)}")
    lo, hi = period(None, None, now)
    rows = rows_for(views, org_id, lo, hi, now)
    projects = {doc["id"]: doc["name"] for _, doc in views.list(PROJECTS, org_id, "project:")}
    bars, highest = _bars(rows, lo, hi)
    return Report(
        group_by=group_by,
        lo=lo,
        hi=hi,
        total=Money(sum((r.billed_cost for r in rows), Decimal(0))),
        estimate=Money(sum((r.list_cost for r in rows), Decimal(0))),
        estimated=any(r.estimated for r in rows),
        lines=_lines(rows, group_by, projects),
        bars=bars,
        chart_width=max(len(bars), 1) * BAR + 4,
        highest=Money(highest),
    )
