"""A short-lived copy of RunPod's GPU offers per key, for checks that tolerate a few seconds' lag.

RunPod's GPU types and their stock change over minutes, while every draft asks for them (R2): a
draft check may use a copy at most `ttl_s` old. Entries are keyed by a digest of the API key
(one organization's connection; a rotated key starts afresh) and the GPU count, so one
organization never sees offers fetched with another's key and no key is held as plain text. A
launch never reads the copy: it asks RunPod, and its answer refreshes the copy.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from application.ports import GpuOffer

DEFAULT_TTL_S = 30.0


class OfferCache:
    def __init__(
        self,
        ttl_s: float = DEFAULT_TTL_S,
        *,
        max_entries: int = 256,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max(1, max_entries)
        self._now = now
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[bytes, int], tuple[float, list[GpuOffer]]] = OrderedDict()

    @staticmethod
    def _key(api_key: str, gpu_count: int) -> tuple[bytes, int]:
        return hashlib.sha256(api_key.encode()).digest(), int(gpu_count)

    def get(self, api_key: str, gpu_count: int) -> list[GpuOffer] | None:
        """The offers fetched with this key for this count less than `ttl_s` ago, else None."""
        if self.ttl_s <= 0:
            return None
        key = self._key(api_key, gpu_count)
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            at, offers = found
            if self._now() - at >= self.ttl_s:
                del self._entries[key]
                return None
            return list(offers)

    def put(self, api_key: str, gpu_count: int, offers: list[GpuOffer]) -> None:
        if self.ttl_s <= 0:
            return
        key = self._key(api_key, gpu_count)
        with self._lock:
            self._entries[key] = (self._now(), list(offers))
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
