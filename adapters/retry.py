"""Bounded exponential backoff with full jitter, for provider calls that are safe to repeat."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from application.errors import ProviderUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """Retries `ProviderUnavailable` only; every other error is a definite answer.

    The n-th wait (n from 0) is uniform in [0, min(max_delay_s, base_delay_s * 2**n)] ("full
    jitter", AWS architecture blog), raised to a server's Retry-After when that is larger, and
    never above max_delay_s: a caller holding a request open must not wait unboundedly.
    """

    max_attempts: int = 4
    base_delay_s: float = 0.2
    max_delay_s: float = 3.0
    sleep: Callable[[float], None] = time.sleep
    jitter: Callable[[], float] = field(default=random.random)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")

    def delay(self, attempt: int, retry_after_s: float | None = None) -> float:
        """The wait after failed attempt number `attempt` (0-based)."""
        cap = min(self.max_delay_s, self.base_delay_s * 2.0**attempt)
        wait = cap * float(self.jitter())
        if retry_after_s is not None:
            wait = max(wait, retry_after_s)
        return min(wait, self.max_delay_s)

    def pause(self, attempt: int, error: BaseException | None = None) -> None:
        extra = getattr(error, "extra", None) or {}
        retry_after = extra.get("retry_after_s")
        self.sleep(self.delay(attempt, float(retry_after) if retry_after is not None else None))

    def run(self, call: Callable[[], T], what: str = "call") -> T:
        """Run `call`, retrying ProviderUnavailable up to max_attempts in all."""
        for attempt in range(self.max_attempts):
            try:
                return call()
            except ProviderUnavailable as exc:
                if attempt + 1 >= self.max_attempts:
                    raise
                log.info(
                    "%s failed (%s); retry %d of %d", what, exc, attempt + 1, self.max_attempts - 1
                )
                self.pause(attempt, exc)
        raise AssertionError("unreachable")  # pragma: no cover
