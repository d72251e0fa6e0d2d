"""Server-Sent Event streams that cannot starve the server.

A stream is an async generator on the event loop (no threadpool thread held while it idles), so
a disconnect cancels it at once (Starlette listens for `http.disconnect`) and its slot is freed.
Open streams are counted per caller, per organization and in total; beyond a cap the request is
refused with 429 and `Retry-After`. On shutdown every stream ends at its next wake-up, so a
SIGTERM does not wait for clients to hang up.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections import Counter
from dataclasses import dataclass, field

from domain.errors import TensorantError


class TooManyStreams(TensorantError):
    problem = "too-many-streams"
    status = 429
    title = "Too many open streams"
    retry_after = 5


@dataclass(frozen=True)
class StreamLimits:
    per_caller: int = 100
    per_org: int = 250
    total: int = 2000
    keepalive_s: float = 15.0


@dataclass
class Lease:
    """One open stream's slot; `release` is idempotent (the generator's end, or its GC)."""

    gate: StreamGate
    caller: str
    org_id: str
    _released: bool = False

    def release(self) -> None:
        self.gate._release(self)


@dataclass
class StreamGate:
    limits: StreamLimits = field(default_factory=StreamLimits)
    _by_caller: Counter[str] = field(default_factory=Counter)
    _by_org: Counter[str] = field(default_factory=Counter)
    _total: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closing: threading.Event = field(default_factory=threading.Event)

    @property
    def open(self) -> int:
        return self._total

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    def acquire(self, caller: str, org_id: str) -> Lease:
        """A slot for one stream, or TooManyStreams naming which cap was reached."""
        lim = self.limits
        with self._lock:
            if self._closing.is_set():
                raise TooManyStreams("the server is shutting down; reconnect to another one")
            if self._by_caller[caller] >= lim.per_caller:
                raise TooManyStreams(
                    f"you have {lim.per_caller} streams open, the most one caller may; close one"
                )
            if self._by_org[org_id] >= lim.per_org:
                raise TooManyStreams(
                    f"your organization has {lim.per_org} streams open, the most it may"
                )
            if self._total >= lim.total:
                raise TooManyStreams("the server holds as many streams as it serves; retry later")
            self._by_caller[caller] += 1
            self._by_org[org_id] += 1
            self._total += 1
        return Lease(self, caller, org_id)

    def bind(self, lease: Lease, owner: object) -> None:
        """Free `lease` when `owner` (a stream's generator) is collected without having run."""
        weakref.finalize(owner, lease.release)

    def _release(self, lease: Lease) -> None:
        with self._lock:
            if lease._released:
                return
            lease._released = True
            for counter, key in ((self._by_caller, lease.caller), (self._by_org, lease.org_id)):
                counter[key] -= 1
                if counter[key] <= 0:
                    del counter[key]
            self._total -= 1

    def close(self) -> None:
        """Shutdown: refuse new streams; open ones end at their next wake-up."""
        self._closing.set()

    async def pause(self, seconds: float) -> bool:
        """Sleep up to `seconds` in short steps; False once the server is closing."""
        step = 0.1
        left = seconds
        while left > 0:
            if self._closing.is_set():
                return False
            await asyncio.sleep(min(step, left))
            left -= step
        return not self._closing.is_set()
