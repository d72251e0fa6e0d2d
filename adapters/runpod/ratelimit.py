"""Client-side pacing for REST v2's per-key quotas (RunPod's REST v2 spec: RateLimit headers).

Every authenticated answer carries `RateLimit: "minute";r=R;t=T, ...` (remaining, seconds to
reset) and `RateLimit-Policy: "minute";q=Q;w=W, ...`. Before each call the tracker:
- waits out a 429's `Retry-After` (the whole of it: a shorter wait would only earn a second 429
  in the same window);
- waits for the reset of any window with nothing left;
- paces when a window runs low (at most `low_fraction` of its quota left): the remaining calls
  are spread evenly over the time left, so the quota lasts until it resets instead of running dry
  and turning into 429s;
- reserves one call locally, so concurrent callers with one key do not all spend the last one.
A wait longer than `max_wait_s` is not taken: the call fails at once as ProviderUnavailable (an
hour or day window cannot be waited out inside a request).
"""

from __future__ import annotations

import hashlib
import math
import re
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from application.errors import ProviderUnavailable

_LIMIT = re.compile(r'"?([A-Za-z0-9_-]+)"?\s*;\s*r=(\d+)\s*;\s*t=(\d+)')
_POLICY = re.compile(r'"?([A-Za-z0-9_-]+)"?\s*;\s*q=(\d+)\s*;\s*w=(\d+)')


@dataclass
class Window:
    remaining: int
    reset_at: float
    quota: int | None = None


def parse_limits(header: str) -> dict[str, tuple[int, int]]:
    """`"minute";r=0;t=12, ...` -> {"minute": (0, 12)}."""
    return {m[1]: (int(m[2]), int(m[3])) for m in _LIMIT.finditer(header or "")}


def parse_policy(header: str) -> dict[str, tuple[int, int]]:
    """`"minute";q=60;w=60, ...` -> {"minute": (60, 60)}."""
    return {m[1]: (int(m[2]), int(m[3])) for m in _POLICY.finditer(header or "")}


def _retry_after(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


class RateLimitTracker:
    """Per-key quota state from the last answer; thread-safe; keys are kept only as hashes."""

    def __init__(
        self,
        *,
        now: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        low_fraction: float = 0.2,
        max_wait_s: float = 90.0,
    ) -> None:
        self.now = now
        self.sleep = sleep
        self.low_fraction = low_fraction
        self.max_wait_s = max_wait_s
        self._lock = threading.Lock()
        self._windows: dict[str, dict[str, Window]] = {}
        self._blocked_until: dict[str, float] = {}
        self.waited_s = 0.0  # total pacing/back-off wait, for tests and metrics

    @staticmethod
    def _id(api_key: str) -> str:
        return hashlib.sha256(api_key.encode()).hexdigest()[:16]

    def _low(self, window: Window) -> int:
        if window.quota is None:
            return 1
        return max(1, math.ceil(window.quota * self.low_fraction))

    def wait_needed(self, api_key: str, reserve: bool = True) -> tuple[float, str]:
        """(seconds to wait before the next call, why); with `reserve`, counts the call."""
        kid, now = self._id(api_key), self.now()
        with self._lock:
            wait, why = max(0.0, self._blocked_until.get(kid, 0.0) - now), "Retry-After"
            for name, w in self._windows.get(kid, {}).items():
                if now >= w.reset_at:
                    continue
                left = w.reset_at - now
                need = (
                    left
                    if w.remaining <= 0
                    else (left / (w.remaining + 1) if w.remaining <= self._low(w) else 0.0)
                )
                if need > wait:
                    wait, why = need, f"the {name} window"
                if reserve:
                    w.remaining -= 1
            return wait, why

    def before_call(self, api_key: str) -> None:
        wait, why = self.wait_needed(api_key)
        if wait > self.max_wait_s:
            raise ProviderUnavailable(
                f"RunPod's rate limit ({why}) allows the next call in {wait:.0f} s",
                retry_after_s=wait,
            )
        if wait > 0:
            self.waited_s += wait
            self.sleep(wait)

    def observe(self, api_key: str, status: int, headers: Mapping[str, str]) -> None:
        """Take the quota state from an answer; a 429 blocks the key until Retry-After."""
        kid, now = self._id(api_key), self.now()
        limits = parse_limits(headers.get("RateLimit", ""))
        policy = parse_policy(headers.get("RateLimit-Policy", ""))
        with self._lock:
            windows = self._windows.setdefault(kid, {})
            for name, (remaining, reset) in limits.items():
                quota = policy.get(name, (None, 0))[0]
                windows[name] = Window(remaining, now + reset, quota)
            if status == 429:
                wait = _retry_after(headers.get("Retry-After"))
                if wait is None:  # no Retry-After: the longest exhausted window, else 1 s
                    wait = max((float(t) for r, t in limits.values() if r == 0), default=1.0)
                self._blocked_until[kid] = max(self._blocked_until.get(kid, 0.0), now + wait)
