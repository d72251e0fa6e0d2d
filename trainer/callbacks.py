"""Callbacks to the control plane, the fast path (T1): a background sender with a bounded queue
and short timeouts, so an unreachable or hanging URL never slows or stops training."""

from __future__ import annotations

import collections
import sys
import threading
import time
import uuid

from trainer import transfer
from trainer.protocol import CALLBACK_PATHS, Log, Progress, Report
from trainer.protocol.reports import dumps

MAX_QUEUE = 5000  # reports waiting; the oldest are dropped first (the mailbox keeps them all)
MAX_LOG_BATCH = 1000  # the callback schema's limit
# The control plane takes a JSON body of at most 1 MiB; a batch stops well short of it (a line
# of 10,000 characters is at most ~120 KB as ASCII-escaped JSON).
MAX_LOG_BATCH_BYTES = 512 * 1024
MAX_BACKOFF_S = 30.0
_BATCH_NAMESPACE = uuid.UUID("1b0d3c9a-3f0e-4d35-9a43-6f8a3c0b7e21")


def batch_id(first: Log, count: int) -> str:
    """The same lines always get the same batch id, so a retry is stored once."""
    return str(uuid.uuid5(_BATCH_NAMESPACE, f"{first.boot}:{first.seq}:{count}"))


def _stale(queued: Report) -> bool:
    """A queued progress report a newer one replaces (any but a training point)."""
    return isinstance(queued, Progress) and queued.phase != "training"


class CallbackSender:
    def __init__(self, base_url: str, run_id: str, token: str, *, timeout_s: float) -> None:
        self._base = f"{base_url}/v1/trainer/runs/{run_id}/"
        self._token = token
        self._timeout = timeout_s
        self._queue: collections.deque[Report] = collections.deque(maxlen=MAX_QUEUE)
        self._cv = threading.Condition()
        self._inflight: list[Report] = []
        self._closed = False
        self.sent = 0
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name="tensorant-callbacks", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:  # never shows the token
        return f"CallbackSender({self._base!r}, queued={len(self._queue)})"

    def publish(self, report: Report) -> None:
        if report.type not in CALLBACK_PATHS:
            return
        with self._cv:
            if report.type == "progress":
                # A training report is a point of the run's curve (R17), sent in order before the
                # export's final report; of other phases (bytes downloaded, exporting) only the
                # newest matters, so the queue never fills with stale ones.
                busy = {id(r) for r in self._inflight}
                kept = [r for r in self._queue if not _stale(r) or id(r) in busy]
                if len(kept) != len(self._queue):
                    self._queue = collections.deque(kept, maxlen=MAX_QUEUE)
            self._queue.append(report)
            self._cv.notify()

    def drain(self, timeout_s: float) -> bool:
        """Wait (bounded) until everything queued was sent or given up; True when empty."""
        deadline = time.monotonic() + timeout_s
        with self._cv:
            while self._queue or self._inflight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cv.wait(left)
        return True

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def _next_request(self) -> tuple[str, bytes, list[Report]]:
        head = self._queue[0]
        if isinstance(head, Log):
            lines: list[Log] = []
            items: list[dict[str, object]] = []
            size = 0
            for r in self._queue:
                if not isinstance(r, Log) or len(lines) == MAX_LOG_BATCH:
                    break
                item = {"time": r.time, "text": r.text, "boot": r.boot, "seq": r.seq}
                item_bytes = len(dumps(item)) + 1
                if lines and size + item_bytes > MAX_LOG_BATCH_BYTES:
                    break
                lines.append(r)
                items.append(item)
                size += item_bytes
            body = {"lines": items, "batch": batch_id(lines[0], len(lines))}
            return "logs", dumps(body).encode(), list(lines)
        return CALLBACK_PATHS[head.type], dumps(head.to_json()).encode(), [head]

    def _run(self) -> None:
        backoff = 0.0
        request: tuple[str, bytes] | None = None  # kept as it is until it was delivered
        while True:
            with self._cv:
                while not self._queue and request is None and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                if request is None:
                    path, body, self._inflight = self._next_request()
                    request = (path, body)
            # A retry resends the very same body (same lines, same batch id): if the first
            # attempt was stored and only its answer lost, the control plane stores it once.
            delivered = self._post(*request)
            with self._cv:
                if delivered is not False:  # sent, or refused for good: never retried
                    # In-flight reports are the queue's head (unless overflow dropped them).
                    done = {id(r) for r in self._inflight}
                    while self._queue and id(self._queue[0]) in done:
                        self._queue.popleft()
                    self._inflight = []
                    request = None
                    backoff = 0.0
                self._cv.notify_all()
            if delivered is False:
                backoff = min(MAX_BACKOFF_S, max(0.5, backoff * 2))
                with self._cv:
                    self._cv.wait(backoff)

    def _post(self, path: str, body: bytes) -> bool | None:
        """True when accepted, None when refused for good (4xx), False to retry later."""
        try:
            transfer.post_json(self._base + path, body, self._token, timeout=self._timeout)
        except transfer.TransferError as e:
            self.failures += 1
            if self.failures in (1, 10, 100) or self.failures % 1000 == 0:
                print(
                    f"tensorant-trainer: callback {path} failed: {e}", file=sys.stderr, flush=True
                )
            if e.status is not None and 400 <= e.status < 500 and e.status not in (408, 429):
                return None
            return False
        self.sent += 1
        return True
