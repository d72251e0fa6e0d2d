"""The sandbox's one clock: real time plus an offset that tests move forward."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta


class SandboxClock:
    """Wall time at construction + elapsed monotonic time + an adjustable offset.

    Monotonic time keeps the clock steady when the host's wall clock jumps; the offset lets
    tests and `/_sandbox/clock` skip hours of billing in milliseconds. `freeze()` stops the real
    part so billing figures can be computed by hand to the cent.
    """

    def __init__(self, start: datetime | None = None) -> None:
        self._lock = threading.Lock()
        self._epoch = (start or datetime.now(UTC)).astimezone(UTC)
        self._mono0 = time.monotonic()
        self._offset = 0.0
        self._frozen_at: float | None = None  # monotonic reading when frozen

    def _elapsed(self) -> float:
        mono = self._frozen_at if self._frozen_at is not None else time.monotonic()
        return mono - self._mono0 + self._offset

    def now(self) -> datetime:
        """The sandbox's current instant, an aware UTC datetime."""
        with self._lock:
            return self._epoch + timedelta(seconds=self._elapsed())

    def advance(self, seconds: float) -> datetime:
        """Move the clock forward (never backward: billing segments must stay ordered)."""
        if seconds < 0:
            raise ValueError("the sandbox clock only moves forward")
        with self._lock:
            self._offset += seconds
            return self._epoch + timedelta(seconds=self._elapsed())

    def advance_to(self, instant: datetime) -> datetime:
        """Move the clock forward to `instant` (no-op when it is already past)."""
        delta = (instant - self.now()).total_seconds()
        return self.advance(max(0.0, delta))

    def freeze(self) -> None:
        """Stop real time from flowing; only `advance` moves the clock afterwards."""
        with self._lock:
            if self._frozen_at is None:
                self._frozen_at = time.monotonic()

    def unfreeze(self) -> None:
        with self._lock:
            if self._frozen_at is not None:
                # The time spent frozen must not suddenly appear, so fold it out of the offset.
                self._offset -= time.monotonic() - self._frozen_at
                self._frozen_at = None

    @property
    def frozen(self) -> bool:
        return self._frozen_at is not None
