"""R4: when a launch is refused. A saved draft meets RunPod as it is now: the GPU may be gone,
its price may have risen above the limit or above what the user accepted, and RunPod starts a
Pod only when the balance covers one hour of it."""

from __future__ import annotations

from decimal import Decimal

from domain.errors import Conflict, DomainError
from domain.rates import money
from domain.run_config import RunConfig


def accepted_price(confirm: bool, price: Decimal | str | None) -> Decimal:
    """R4: launching rents a billable GPU, so it needs a confirmation that names the price."""
    if not confirm or price is None:
        raise ConfirmationRequired(
            "launching rents a billable GPU: send confirm: true with the hourly price you "
            "accept (accepted_price_per_hour)"
        )
    return money(price)


def quote(
    config: RunConfig,
    price_per_gpu: Decimal | None,
    datacenters: list[str],
    volume_datacenter: str | None,
    accepted: Decimal,
    no_cuda13: tuple[str, ...] = (),
) -> tuple[Decimal, Conflict | None]:
    """The hourly price of the run's Pod now, and why the launch is refused, if it is.

    `price_per_gpu` is None when RunPod no longer offers the GPU; with a network volume the GPU
    must be offered in the volume's datacenter, on a host of CUDA 13 or newer (`no_cuda13`: the
    datacenters where RunPod has it only on older drivers).
    """
    if volume_datacenter is not None and volume_datacenter in no_cuda13:
        return Decimal(0), AvailabilityChanged(
            f"{config.gpu_type_id} has no host with a CUDA 13 driver in {volume_datacenter} "
            "now (RunPod has it there only on older drivers, where the trainer cannot start); "
            "choose another GPU or try later"
        )
    if (
        price_per_gpu is None
        or not datacenters
        or (volume_datacenter is not None and volume_datacenter not in datacenters)
    ):
        where = f" in {volume_datacenter}" if volume_datacenter else ""
        return Decimal(0), AvailabilityChanged(
            f"{config.gpu_type_id} is no longer available{where}; choose another GPU or try later"
        )
    count = config.gpu_count
    price = price_per_gpu * count
    limit = money(config.price_limit_per_hour)
    if price > limit:
        return price, PriceAboveLimit(
            f"{count} × {config.gpu_type_id} costs ${price}/hour now, above the limit "
            f"${limit}/hour",
            price_per_hour=str(price),
            price_limit_per_hour=str(limit),
        )
    if price > accepted:
        return price, PriceChanged(
            f"the price is ${price}/hour now; you accepted ${accepted}/hour — review and "
            "confirm the new price",
            price_per_hour=str(price),
        )
    return price, None


def balance_refusal(balance: Decimal | None, price: Decimal) -> LowBalance | None:
    """RunPod's own rule: the balance must cover one hour of the Pod. An unknown balance (REST
    v2 does not say) is RunPod's to judge: its 402 reaches the run as a failed launch."""
    if balance is None or balance >= price:
        return None
    return LowBalance(
        f"the RunPod balance ${balance} does not cover one hour (${price}); RunPod requires "
        "that to start a Pod — add credit in RunPod → Billing",
        balance=str(balance),
    )


class ConfirmationRequired(DomainError):
    problem = "confirmation-required"
    title = "The request needs an explicit confirmation"


class AvailabilityChanged(Conflict):
    problem = "availability-changed"
    title = "The GPU is no longer available as configured"


class PriceAboveLimit(Conflict):
    problem = "price-above-limit"
    title = "The current price is above the run's price limit"


class PriceChanged(Conflict):
    problem = "price-changed"
    title = "The price changed since you confirmed it"


class LowBalance(Conflict):
    problem = "low-balance"
    title = "The RunPod balance does not cover one hour of the Pod"
