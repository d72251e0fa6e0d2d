"""The clock's work: once per interval, the reconcile tick (K2) and the read of RunPod's bill (B4).

Both run where the outbox relay runs (`tensorant serve` embedded, or `tensorant projector`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger("tensorant.tickers")


class Ticker:
    """Calls `action(slot)` on a thread once per time slot of `interval` seconds.

    A slot is `int(time.time() // interval)`, the same number in every process, so copies of a
    ticker name the same slot (the reconcile message's id is per slot: copies do not pile up
    work). A failed call is tried again within its slot. `at_start=False` waits for the next
    slot before the first call.
    """

    def __init__(
        self, name: str, interval: float, action: Callable[[int], object], *, at_start: bool = True
    ) -> None:
        self.name = name
        self.interval = interval
        self.action = action
        self.at_start = at_start
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def slot(self) -> int:
        return int(time.time() // self.interval)

    def start(self) -> Ticker:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._thread = None

    def _loop(self) -> None:
        last = -1 if self.at_start else self.slot()
        while not self._stop.is_set():
            slot = self.slot()
            if slot != last:
                try:
                    self.action(slot)
                    last = slot
                except Exception:  # the broker or RunPod may be briefly away; try again
                    log.exception("%s failed; trying again", self.name)
            self._stop.wait(min(self.interval, 1.0))
