"""A short-lived copy of RunPod's GPU offers per key, for checks that tolerate a few seconds' lag.

RunPod's GPU types and their stock change over minutes, while every draft asks for them (R2): a
draft check may use a copy at most `ttl_s` old. Entries are keyed by a digest of the API key
(one organization's connection; a rotated key starts afresh) and the GPU count, so one
organization never sees offers fetched with another's key and no key is held as plain text. A
launch never reads the copy: it asks RunPod, and its answer refreshes the copy.

A copy can also be found by an account's name (`name`, `get_named`): a draft names the
organization's connection at its version, so it reads the copy without decrypting the key from
the vault (a SQLite or PostgreSQL read per draft). The name leads to the key's digest, so a
launch's answer refreshes what the name finds, and a new version of the connection (a rotated
key, a disconnection) is a name not seen yet.
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
        self._names: OrderedDict[str, bytes] = OrderedDict()  # an account's name -> key digest

    @staticmethod
    def _key(api_key: str, gpu_count: int) -> tuple[bytes, int]:
        return hashlib.sha256(api_key.encode()).digest(), int(gpu_count)

    def get(self, api_key: str, gpu_count: int) -> list[GpuOffer] | None:
        """The offers fetched with this key for this count less than `ttl_s` ago, else None."""
        if self.ttl_s <= 0:
            return None
        return self._get(self._key(api_key, gpu_count))

    def name(self, account: str, api_key: str) -> None:
        """`account` names this key from now on (for `get_named`)."""
        if self.ttl_s <= 0:
            return
        digest = self._key(api_key, 0)[0]
        with self._lock:
            self._names[account] = digest
            self._names.move_to_end(account)
            while len(self._names) > self.max_entries:
                self._names.popitem(last=False)

    def get_named(self, account: str, gpu_count: int) -> list[GpuOffer] | None:
        """`get` with the key `account` names, without the key; None if it names none."""
        if self.ttl_s <= 0:
            return None
        digest = self._names.get(account)
        return None if digest is None else self._get((digest, int(gpu_count)))

    def _get(self, key: tuple[bytes, int]) -> list[GpuOffer] | None:
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
