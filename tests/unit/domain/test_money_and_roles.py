"""Exact figures for the small modules that decide money and permission (A2, B1, B4).

Written against the mutation run (docs/mutation.md): each assertion pins a value a
mutant of `domain/access.py`, `domain/rates.py` or `domain/billing.py` would change.
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal
from uuid import NAMESPACE_URL, uuid5

import pytest

from domain import rates
from domain.access import AUDITOR, FINANCE, MEMBER, OWNER, PERMISSIONS, ROLES, require
from domain.billing import (
    NETWORK_VOLUME,
    POD,
    InvalidProviderCharge,
    ProviderBill,
    charge_key,
)
from domain.errors import Forbidden

AT = datetime(2026, 6, 1, 12, tzinfo=UTC)

# The whole permission table, written out: a role added to or dropped from any permission fails.
GRANTS = {
    "read": {OWNER, MEMBER, AUDITOR, FINANCE},
    "manage_connections": {OWNER},
    "discover_volumes": {OWNER},
    "manage_projects": {OWNER, MEMBER},
    "manage_runs": {OWNER, MEMBER},
    "billing": {OWNER, FINANCE},
    "audit": {OWNER, AUDITOR},
    "manage_members": {OWNER},
    "manage_webhooks": {OWNER},  # R20
}


def test_a2_the_permission_table_is_exactly_the_documented_one() -> None:
    assert ROLES == ("owner", "member", "auditor", "finance")
    assert {k: set(v) for k, v in PERMISSIONS.items()} == GRANTS


@pytest.mark.parametrize("permission", sorted(GRANTS))
@pytest.mark.parametrize("role", ["owner", "member", "auditor", "finance"])
def test_a2_require_refuses_exactly_the_roles_without_the_permission(
    role: str, permission: str
) -> None:
    if role in GRANTS[permission]:
        require(role, permission)
        return
    with pytest.raises(Forbidden) as e:
        require(role, permission)
    assert e.value.detail == f"the role '{role}' may not {permission.replace('_', ' ')}"
    assert e.value.extra == {"role": role}


def test_a2_an_unknown_role_holds_no_permission() -> None:
    with pytest.raises(Forbidden):
        require("visitor", "read")


def test_b1_rates_in_force_are_the_latest_effective_not_after_the_time() -> None:
    old = rates.StorageRates(effective_from=datetime(2024, 1, 1, tzinfo=UTC))
    new = rates.StorageRates(
        effective_from=datetime(2026, 1, 1, tzinfo=UTC), network_volume_tier1=Decimal("0.09")
    )
    newest = rates.StorageRates(
        effective_from=datetime(2027, 1, 1, tzinfo=UTC), network_volume_tier1=Decimal("0.11")
    )
    table = (old, newest, new)  # order in the table does not matter
    assert rates.rates_at(datetime(2025, 6, 1, tzinfo=UTC), table) is old
    assert rates.rates_at(AT, table) is new
    assert rates.rates_at(datetime(2026, 1, 1, tzinfo=UTC), table) is new  # effective that instant
    assert rates.rates_at(datetime(2027, 3, 1, tzinfo=UTC), table) is newest
    # Before every effective date: the first entry of the table.
    assert rates.rates_at(datetime(2020, 1, 1, tzinfo=UTC), table) is old


def test_b1_the_default_prices_are_runpods() -> None:
    r = rates.rates_at(AT)
    assert (
        r.container_disk_running,
        r.volume_disk_running,
        r.volume_disk_stopped,
        r.network_volume_tier1,
        r.network_volume_tier1_limit_gb,
        r.network_volume_tier2,
    ) == (Decimal("0.10"), Decimal("0.10"), Decimal("0.20"), Decimal("0.07"), 1000, Decimal("0.05"))
    assert Decimal(730) == rates.HOURS_PER_MONTH


@pytest.mark.parametrize(
    ("size_gb", "per_month"),
    [
        (0, Decimal("0")),
        (1, Decimal("0.07")),
        (100, Decimal("7.00")),
        (999, Decimal("69.93")),
        (1000, Decimal("70.00")),
        (1001, Decimal("70.05")),
        (1500, Decimal("95.00")),
    ],
)
def test_b1_network_volume_tiers_to_the_cent(size_gb: int, per_month: Decimal) -> None:
    assert rates.network_volume_per_month(size_gb, AT) == per_month


def test_b1_disk_per_hour_is_the_monthly_price_over_730_hours() -> None:
    assert rates.per_hour(Decimal("730")) == Decimal(1)
    # 20 GB container + 50 GB volume at $0.10/GB-month while running.
    assert rates.running_disk_per_hour(20, 50, AT) == Decimal("7.00") / Decimal(730)
    assert rates.running_disk_per_hour(20, 0, AT) == Decimal("2.00") / Decimal(730)
    assert rates.running_disk_per_hour(0, 50, AT) == Decimal("5.00") / Decimal(730)
    # Stopped: only the volume disk bills, at $0.20/GB-month.
    assert rates.stopped_disk_per_hour(50, AT) == Decimal("10.00") / Decimal(730)


@pytest.mark.parametrize(
    ("amount", "rounded"),
    [
        ("0.005", "0.01"),
        ("0.004999", "0.00"),
        ("1.235", "1.24"),
        ("-0.005", "-0.01"),
        ("2", "2.00"),
    ],
)
def test_b1_cents_round_half_up(amount: str, rounded: str) -> None:
    assert str(rates.cents(Decimal(amount))) == rounded


def test_b1_money_keeps_the_digits_it_was_given() -> None:
    d = Decimal("1.640")
    assert rates.money(d) is d
    assert rates.money(0.1) == Decimal("0.1")  # not 0.1000000000000000055511151231257827
    assert rates.money("1.64") == Decimal("1.64")
    assert rates.money(3) == Decimal(3)


def charge(
    kind: str = POD, start: str = "2026-06-01T10:00:00Z", amount: str = "1.64"
) -> dict[str, str]:
    return {
        "kind": kind,
        "resource_id": "pod-1",
        "start": start,
        "end": start.replace("10:00", "11:00"),
        "amount": amount,
    }


def test_b4_a_bill_records_only_new_or_changed_hours() -> None:
    bill = ProviderBill.open("org-1", date(2026, 6, 1), "system", AT)
    # The id is part of the stored log: a bill of the same organization and day must find it.
    assert bill.id == uuid5(NAMESPACE_URL, "tensorant:provider-bill:org-1:2026-06-01")
    assert bill.id == ProviderBill.id_for("org-1", date(2026, 6, 1))
    assert bill.id != ProviderBill.id_for("org-1", date(2026, 6, 2))
    assert bill.id != ProviderBill.id_for("org-2", date(2026, 6, 1))
    assert (bill.org_id, bill.day, bill.amounts) == ("org-1", "2026-06-01", {})
    assert bill.record([charge(), charge(NETWORK_VOLUME)], "system", AT) == 2
    assert bill.amounts == {
        "pod:pod-1:2026-06-01T10:00:00Z": "1.64",
        "network_volume:pod-1:2026-06-01T10:00:00Z": "1.64",
    }
    events = bill.collect_events()
    assert len(events) == 2
    assert [getattr(e, "actor") for e in events] == ["system", "system"]  # noqa: B009
    assert [e.timestamp for e in events] == [AT, AT]
    assert getattr(events[-1], "charges") == [charge(), charge(NETWORK_VOLUME)]  # noqa: B009
    # The same hour again: nothing new, no event.
    assert bill.record([charge()], "system", AT) == 0
    assert bill.collect_events() == []
    # A corrected amount replaces the estimate of that hour only.
    assert bill.record([charge(amount="1.70"), charge(NETWORK_VOLUME)], "finance-import", AT) == 1
    assert bill.amounts["pod:pod-1:2026-06-01T10:00:00Z"] == "1.70"
    corrected = bill.collect_events()
    assert [getattr(e, "charges") for e in corrected] == [[charge(amount="1.70")]]  # noqa: B009
    assert [getattr(e, "actor") for e in corrected] == ["finance-import"]  # noqa: B009


def test_b4_a_bill_refuses_unknown_kinds_and_hours_of_another_day() -> None:
    bill = ProviderBill.open("org-1", date(2026, 6, 1), "system", AT)
    with pytest.raises(InvalidProviderCharge, match="unknown resource kind 'gpu'"):
        bill.record([charge(kind="gpu")], "system", AT)
    with pytest.raises(InvalidProviderCharge, match="is not on 2026-06-01"):
        bill.record([charge(start="2026-06-02T10:00:00Z")], "system", AT)
    assert bill.amounts == {}
    assert charge_key(POD, "p", "s") == "pod:p:s"
