"""Slowing down repeated failures.

Failed authentications are counted per client address, failed RunPod key and storage checks
per organization (each check is a call to RunPod or S3 from our address). Past `limit` failures
within `window_s`, that caller is answered 429 with `Retry-After` until the oldest failure ages
out; successes are never slowed. Counts are per API process (in memory): a determined attacker
spread over processes gets `processes × limit` tries a window, still far from guessing a 256-bit
token, and RunPod sees at most that many key checks.
"""

from __future__ import annotations

import math
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from domain.errors import TensorantError

T = TypeVar("T")


class TooManyFailures(TensorantError):
    problem = "too-many-failures"
    status = 429
    title = "Too many failed attempts; wait before trying again"

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail)
        self.retry_after = retry_after


@dataclass
class Throttle:
    what: str  # "authentications", "key checks": for the message
    limit: int = 10
    window_s: float = 60.0
    clock: Callable[[], float] = time.monotonic
    _failures: dict[str, deque[float]] = field(default_factory=lambda: defaultdict(deque))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def check(self, key: str) -> None:
        """Raise TooManyFailures while `key` has `limit` failures within the window."""
        now = self.clock()
        with self._lock:
            failures = self._failures.get(key)
            if not failures:
                return
            while failures and failures[0] <= now - self.window_s:
                failures.popleft()
            if not failures:
                del self._failures[key]
                return
            if len(failures) < self.limit:
                return
            wait = max(1, math.ceil(failures[0] + self.window_s - now))
        raise TooManyFailures(
            f"{self.limit} failed {self.what} within {self.window_s:g} s; try again in {wait} s",
            retry_after=wait,
        )

    def fail(self, key: str) -> None:
        with self._lock:
            failures = self._failures[key]
            failures.append(self.clock())
            while len(failures) > self.limit:
                failures.popleft()

    def guard(self, key: str, action: Callable[[], T]) -> T:
        """Run `action` unless `key` is slowed; a refusal it raises counts as a failure."""
        self.check(key)
        try:
            return action()
        except TooManyFailures:
            raise
        except TensorantError as e:
            if 400 <= e.status < 500 and e.problem != "validation-error":
                self.fail(key)
            raise
