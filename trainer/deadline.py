"""The run's deadline inside the Pod (R5): stop training in time to export before the limit.

The manifest says when RunPod's runtime clock reaches the run's limit. Training stops once
what is left is the export reserve: the time to write, upload and have the control plane verify
an adapter of this size, with a margin. Past the limit the reconciler stops the Pod and only a
SIGTERM partial remains, so an adapter exported a little early is worth more than a step more.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

FIXED_RESERVE_S = 60.0  # saving, the final report, and the control plane's verification
BYTES_PER_S = 10e6  # writing, uploading and reading the adapter back, conservatively
CLOCK_POLL_S = 0.1  # the emulated clock is on this machine: a read costs a millisecond


def export_reserve_s(adapter_bytes: int) -> float:
    """Seconds kept for the export of an adapter of `adapter_bytes` (fp32 LoRA weights)."""
    return FIXED_RESERVE_S + 2 * adapter_bytes / BYTES_PER_S


class Clock:
    """UTC now: the machine's, or the emulated RunPod's when TENSORANT_CLOCK_URL is set (the
    sandbox's clock moves forward in tests; it is read at most every CLOCK_POLL_S)."""

    def __init__(self, url: str | None = None) -> None:
        self.url = url
        self._read: tuple[datetime, float, bool] | None = None  # (now, monotonic, frozen)

    def now(self) -> datetime:
        if not self.url:
            return datetime.now(UTC)
        mono = time.monotonic()
        if self._read is None or mono - self._read[1] >= CLOCK_POLL_S:
            try:
                with urllib.request.urlopen(self.url, timeout=5) as answer:  # noqa: S310
                    body = json.loads(answer.read())
                at = datetime.fromisoformat(str(body["now"]).replace("Z", "+00:00"))
                self._read = (at, mono, bool(body.get("frozen")))
            except (OSError, ValueError, KeyError):
                if self._read is None:
                    return datetime.now(UTC)
        at, read_mono, frozen = self._read
        return at if frozen else at + timedelta(seconds=mono - read_mono)


class Deadline:
    def __init__(self, at: datetime | None, reserve_s: float, clock: Clock) -> None:
        self.at = at
        self.reserve_s = reserve_s
        self.clock = clock
        self.reached = False

    @classmethod
    def for_training(cls, at: datetime | None, adapter_bytes: int, clock: Clock) -> Deadline:
        """The deadline as training begins: the export reserve for this adapter, but never
        more than half the time left then, so that a short runtime limit still trains (and a
        limit the boot used up ends at the SIGTERM partial, as before)."""
        reserve = export_reserve_s(adapter_bytes)
        if at is not None:
            left = (at - clock.now()).total_seconds()
            reserve = min(reserve, max(0.0, left) / 2)
        return cls(at, reserve, clock)

    def __call__(self) -> bool:
        """True once training must stop to export in time (and from then on)."""
        if self.at is None:
            return False
        if not self.reached:
            self.reached = self.clock.now() >= self.at - timedelta(seconds=self.reserve_s)
        return self.reached


def either(*checks: Callable[[], bool]) -> Callable[[], bool]:
    return lambda: any(check() for check in checks)
