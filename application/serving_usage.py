"""Managed serving's rate limit and usage (V2): the token bucket's arithmetic, the usage
counters' names, and the in-process meter (one process; services built without a store).

A bucket is (tokens, at): full (`capacity`) when first used, refilled at `per_second` since
`at`, never above `capacity`. A chat request takes one token or is refused with the seconds
until one is there. The stores (`adapters/serving_meter.py`) run `take_token` under a row lock,
so every API process draws from one bucket per organization.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence

USAGE_FIELDS = ("requests", "prompt_tokens", "completion_tokens", "errors", "cold_starts")


def take_token(
    tokens: float | None, at: float | None, now: float, capacity: float, per_second: float
) -> tuple[float, float]:
    """(tokens left, seconds to wait): wait 0 when a token was taken. A clock that went back
    (another process's) refills nothing rather than taking tokens away."""
    if tokens is None or at is None:
        tokens, at = capacity, now
    tokens = min(capacity, tokens + max(0.0, now - at) * per_second)
    if tokens >= 1:
        return tokens - 1, 0.0
    return tokens, max(1.0, math.ceil((1 - tokens) / per_second))


class MemoryServingMeter:
    """One process's buckets and totals (lost on restart)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}
        self._usage: dict[str, dict[str, int]] = {}

    def take(self, key: str, capacity: float, per_second: float, now: float) -> float:
        with self._lock:
            tokens, at = self._buckets.get(key, (None, None))
            left, wait = take_token(tokens, at, now, capacity, per_second)
            self._buckets[key] = (left, max(now, at or now))
            return wait

    def add_usage(self, deployment_id: str, counts: Mapping[str, int]) -> None:
        with self._lock:
            totals = self._usage.setdefault(deployment_id, dict.fromkeys(USAGE_FIELDS, 0))
            for name in USAGE_FIELDS:
                totals[name] += int(counts.get(name, 0))

    def usage(self, deployment_ids: Sequence[str]) -> dict[str, dict[str, int]]:
        with self._lock:
            return {d: dict(self._usage[d]) for d in deployment_ids if d in self._usage}
