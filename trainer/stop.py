"""SIGTERM (stop, runtime limit): installed at start, because a Python PID 1 ignores SIGTERM
without a handler and RunPod gives a stopping container only a short grace period.

While loading there is nothing to save, so the signal interrupts at once; while training it
sets a flag the loop checks between micro-batches, and the trainer saves the partial adapter;
while exporting it lets the export finish; while idling it exits."""

from __future__ import annotations

import signal
import sys
import time
from types import FrameType

from trainer.errors import Interrupted

LOADING, TRAINING, EXPORTING, IDLE = "loading", "training", "exporting", "idle"


class StopSignal:
    def __init__(self) -> None:
        self.requested = False
        self.received_at: float | None = None
        self.mode = LOADING

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        first = not self.requested
        self.requested = True
        if first:
            self.received_at = time.monotonic()
            print(f"tensorant-trainer: {signal.Signals(signum).name} while {self.mode}", flush=True)
        if self.mode == LOADING:
            self.mode = EXPORTING  # the handler for what follows must not raise again
            raise Interrupted
        if self.mode == IDLE:
            sys.exit(0)

    def __call__(self) -> bool:
        return self.requested
