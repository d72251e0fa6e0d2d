"""REST v2 per-key quotas over minute/hour/day windows, with the IETF ratelimit headers.

RunPod's REST v2 spec: every authenticated /v2 answer carries `RateLimit` and
`RateLimit-Policy`; exhausting any window gives a 429 problem with `Retry-After` until it resets.
Windows are fixed and aligned to multiples of their length on the sandbox clock (inference: the
spec does not say whether windows are fixed or sliding). 401s carry no headers and count
nothing; a refused (429) request does not consume quota (inference).
"""

from __future__ import annotations

import json
import math
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .clock import SandboxClock
from .faults import Faults
from .tenants import account_key

# Ten times the spec's example quotas, so flows that do not test limits never meet them.
DEFAULT_QUOTAS = {"minute": 600, "hour": 30_000, "day": 500_000}
WINDOW_SECONDS = {"minute": 60, "hour": 3600, "day": 86_400}


def quotas(faults: Faults) -> dict[str, int]:
    chosen = {
        "minute": faults.rate_limit_per_minute,
        "hour": faults.rate_limit_per_hour,
        "day": faults.rate_limit_per_day,
    }
    return {w: int(q) if q is not None else DEFAULT_QUOTAS[w] for w, q in chosen.items()}


@dataclass(frozen=True)
class Decision:
    allowed: bool
    headers: dict[str, str]
    exceeded: str | None = None  # the window that refused


@dataclass
class RequestLog:
    """What the limiter saw, for tests: one (client, status, exceeded window id) per request."""

    entries: list[tuple[str, int, str | None]] = field(default_factory=list)

    def counts(self) -> Counter[int]:
        return Counter(status for _, status, _ in self.entries)


class RateLimiter:
    """Counts requests per (key, window, window index) on the sandbox clock."""

    def __init__(self, clock: SandboxClock) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._used: dict[tuple[str, str, int], int] = {}
        self.log = RequestLog()

    def check(self, key: str, faults: Faults, client: str = "") -> Decision:
        now = self.clock.now().timestamp()
        q = quotas(faults)
        with self._lock:
            state = {}
            for window, seconds in WINDOW_SECONDS.items():
                index = int(now // seconds)
                used = self._used.get((key, window, index), 0)
                reset = max(1, math.ceil((index + 1) * seconds - now))
                state[window] = (index, used, reset)
            exceeded = next((w for w, (_, used, _) in state.items() if used >= q[w]), None)
            if exceeded is None:
                for window, (index, _, _) in state.items():
                    self._used[(key, window, index)] = self._used.get((key, window, index), 0) + 1
            remaining = {
                w: max(0, q[w] - used - (0 if exceeded else 1)) for w, (_, used, _) in state.items()
            }
            headers = {
                "RateLimit": ", ".join(
                    f'"{w}";r={remaining[w]};t={state[w][2]}' for w in WINDOW_SECONDS
                ),
                "RateLimit-Policy": ", ".join(
                    f'"{w}";q={q[w]};w={s}' for w, s in WINDOW_SECONDS.items()
                ),
            }
            if exceeded is not None:
                # Wait for the longest exhausted window; a shorter one would only 429 again.
                exhausted = [w for w, (_, used, _) in state.items() if used >= q[w]]
                headers["Retry-After"] = str(max(state[w][2] for w in exhausted))
                window_id = f"{exceeded}:{state[exceeded][0]}"
                self.log.entries.append((client, 429, window_id))
                return Decision(False, headers, exceeded)
            return Decision(True, headers)

    def record(self, client: str, status: int) -> None:
        with self._lock:
            self.log.entries.append((client, status, None))

    def reset(self) -> None:
        with self._lock:
            self._used.clear()
            self.log = RequestLog()


class RateLimitMiddleware:
    """Applies the limiter to authenticated /v2 calls and adds the headers to every answer."""

    def __init__(
        self, app: ASGIApp, limiter: RateLimiter, model: Any, valid_keys: tuple[str, ...]
    ) -> None:
        self.app = app
        self.limiter = limiter
        self.model = model
        self.valid_keys = valid_keys

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope.get("path", "").startswith("/v2/"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode().lower(): v.decode() for k, v in scope.get("headers", [])}
        auth = headers.get("authorization", "")
        key = auth[7:].strip() if auth.lower().startswith("bearer ") else ""
        if account_key(key) not in self.valid_keys:
            await self.app(scope, receive, send)  # the route answers 401, without headers
            return
        client = headers.get("user-agent", "")
        decision = self.limiter.check(key, self.model.faults, client)
        if not decision.allowed:
            body = json.dumps(
                {
                    "title": "Too Many Requests",
                    "status": 429,
                    "detail": f"rate limit exceeded for the {decision.exceeded} window",
                }
            ).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 429,
                    "headers": [
                        (b"content-type", b"application/problem+json"),
                        (b"content-length", str(len(body)).encode()),
                        *[(k.lower().encode(), v.encode()) for k, v in decision.headers.items()],
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [(k.lower().encode(), v.encode()) for k, v in decision.headers.items()]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
                self.limiter.record(client, int(message["status"]))
            await send(message)

        await self.app(scope, receive, send_with_headers)
