"""The short-lived copy of GPU offers: per key and GPU count, gone after its TTL, and never
read by a plain ask (a launch's)."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, cast

from adapters.retry import RetryPolicy
from adapters.runpod.compute import RunPodCompute
from adapters.runpod.offer_cache import OfferCache
from adapters.runpod.wire import Wire
from application.ports import GpuOffer

A100 = "NVIDIA A100 80GB PCIe"


def offer(stock: str = "High") -> GpuOffer:
    return GpuOffer(A100, "A100", 80, Decimal("1.64"), {"EU-RO-1": stock})


@dataclass
class Clock:
    t: float = 100.0

    def __call__(self) -> float:
        return self.t


@dataclass
class CountingWire:
    """Answers GPU offers from `stock` and counts how often RunPod was asked."""

    name: str = "stub"
    stock: str = "High"
    asked: list[tuple[str, int]] = field(default_factory=list)

    def gpus(self, api_key: str, gpu_count: int) -> list[GpuOffer]:
        self.asked.append((api_key, gpu_count))
        return [offer(self.stock)]


def compute(wire: CountingWire, cache: OfferCache) -> RunPodCompute:
    return RunPodCompute(
        cast(Wire, wire),
        volumes=cast(Any, None),
        billing=cast(Any, None),
        retry=RetryPolicy(max_attempts=1),
        offers=cache,
    )


def test_a_copy_answers_until_its_ttl_and_not_after() -> None:
    clock = Clock()
    cache = OfferCache(30.0, now=clock)
    cache.put("key-a", 1, [offer()])
    clock.t += 29.9
    assert cache.get("key-a", 1) == [offer()]
    clock.t += 0.1
    assert cache.get("key-a", 1) is None


def test_a_copy_is_only_for_the_key_and_gpu_count_it_was_fetched_with() -> None:
    cache = OfferCache(30.0, now=Clock())
    cache.put("key-a", 1, [offer()])
    assert cache.get("key-b", 1) is None  # another organization's (or a rotated) key
    assert cache.get("key-a", 2) is None  # stock differs with the GPU count
    assert cache.get("key-a", 1) == [offer()]


def test_the_cache_keeps_no_plain_key_and_stays_bounded() -> None:
    cache = OfferCache(30.0, max_entries=2, now=Clock())
    for key in ("key-a", "key-b", "key-c"):
        cache.put(key, 1, [offer()])
    assert cache.get("key-a", 1) is None  # the oldest entry made room
    assert cache.get("key-c", 1) == [offer()]
    assert not any("key-" in repr(k) for k in cache._entries)


def test_a_zero_ttl_caches_nothing() -> None:
    cache = OfferCache(0.0, now=Clock())
    cache.put("key-a", 1, [offer()])
    assert cache.get("key-a", 1) is None


def test_a_cached_ask_reuses_a_recent_answer_while_a_plain_ask_always_asks_runpod() -> None:
    clock = Clock()
    wire = CountingWire()
    provider = compute(wire, OfferCache(30.0, now=clock))
    assert provider.list_gpus("key-a", allow_cached=True)[0].stock == {"EU-RO-1": "High"}
    wire.stock = "None"  # RunPod ran out
    assert provider.list_gpus("key-a", allow_cached=True)[0].stock == {"EU-RO-1": "High"}
    assert len(wire.asked) == 1
    assert provider.list_gpus("key-a")[0].stock == {"EU-RO-1": "None"}  # a launch's ask
    assert len(wire.asked) == 2
    # the plain ask refreshed the copy that drafts read
    assert provider.list_gpus("key-a", allow_cached=True)[0].stock == {"EU-RO-1": "None"}
    clock.t += 31
    wire.stock = "Low"
    assert provider.list_gpus("key-a", allow_cached=True)[0].stock == {"EU-RO-1": "Low"}
    assert len(wire.asked) == 3


def test_a_named_copy_is_the_keys_copy_found_without_the_key() -> None:
    clock = Clock()
    wire = CountingWire()
    provider = compute(wire, OfferCache(30.0, now=clock))
    assert provider.cached_gpus("conn@3") is None  # named by no ask yet
    provider.list_gpus("key-a", allow_cached=True, account="conn@3")
    assert provider.cached_gpus("conn@3") == [offer()]
    assert provider.cached_gpus("conn@3", 2) is None  # another GPU count
    assert provider.cached_gpus("conn@4") is None  # the connection's next version
    wire.stock = "None"
    provider.list_gpus("key-a")  # a launch's ask refreshes what the name finds
    assert provider.cached_gpus("conn@3")[0].stock == {"EU-RO-1": "None"}  # type: ignore[index]
    clock.t += 30
    assert provider.cached_gpus("conn@3") is None  # as old as the TTL: gone
    assert len(wire.asked) == 2


def test_names_stay_bounded_and_keep_no_plain_key() -> None:
    cache = OfferCache(30.0, max_entries=2, now=Clock())
    for n, key in enumerate(("key-a", "key-b", "key-c")):
        cache.put(key, 1, [offer()])
        cache.name(f"conn@{n}", key)
    assert cache.get_named("conn@0", 1) is None  # the oldest name made room
    assert cache.get_named("conn@2", 1) == [offer()]
    assert len(cache._names) == 2
    assert not any("key-" in repr(v) for v in cache._names.values())
    zero = OfferCache(0.0, now=Clock())
    zero.put("key-a", 1, [offer()])
    zero.name("conn@0", "key-a")
    assert zero.get_named("conn@0", 1) is None
