"""RunPod's storage prices (B1) as configuration with effective dates; money is Decimal."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import ROUND_HALF_UP, Decimal

HOURS_PER_MONTH = Decimal(730)  # RunPod quotes $/GB-month; 730 h is the average month.
CENT = Decimal("0.01")


@dataclass(frozen=True)
class StorageRates:
    effective_from: datetime
    container_disk_running: Decimal = Decimal("0.10")  # $/GB-month, running only
    volume_disk_running: Decimal = Decimal("0.10")
    volume_disk_stopped: Decimal = Decimal("0.20")
    network_volume_tier1: Decimal = Decimal("0.07")
    network_volume_tier1_limit_gb: int = 1000
    network_volume_tier2: Decimal = Decimal("0.05")


RATES: tuple[StorageRates, ...] = (StorageRates(effective_from=datetime(2024, 1, 1, tzinfo=UTC)),)


def rates_at(at: datetime, table: tuple[StorageRates, ...] = RATES) -> StorageRates:
    """The rates in force at `at` (the latest whose effective date is not after it)."""
    current = [r for r in table if r.effective_from <= at]
    return max(current, key=lambda r: r.effective_from) if current else table[0]


def network_volume_per_month(size_gb: int, at: datetime) -> Decimal:
    r = rates_at(at)
    tier1 = min(size_gb, r.network_volume_tier1_limit_gb)
    tier2 = max(size_gb - r.network_volume_tier1_limit_gb, 0)
    return tier1 * r.network_volume_tier1 + tier2 * r.network_volume_tier2


def per_hour(per_month: Decimal) -> Decimal:
    return per_month / HOURS_PER_MONTH


def running_disk_per_hour(container_gb: int, volume_gb: int, at: datetime) -> Decimal:
    r = rates_at(at)
    return per_hour(container_gb * r.container_disk_running + volume_gb * r.volume_disk_running)


def stopped_disk_per_hour(volume_gb: int, at: datetime) -> Decimal:
    return per_hour(volume_gb * rates_at(at).volume_disk_stopped)


def cents(amount: Decimal) -> Decimal:
    return amount.quantize(CENT, rounding=ROUND_HALF_UP)


def money(value: object) -> Decimal:
    """Parse a price from the API or a provider; floats go through str to keep their digits."""
    return value if isinstance(value, Decimal) else Decimal(str(value))
