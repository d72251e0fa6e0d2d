"""Request ids, one structured log line per request, and Prometheus request metrics (O3)."""

from __future__ import annotations

import logging
import time
import uuid

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("tensorant.http")


class Metrics:
    """A registry per app, so several apps in one process (tests) do not collide."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "tensorant_http_requests", "HTTP requests", ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "tensorant_http_request_seconds", "HTTP request latency", ["method", "route"],
            registry=self.registry,
        )


class RequestContext:
    """Pure ASGI (no BaseHTTPMiddleware): cheap, and streaming responses stay streaming."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = Headers(scope=scope).get("x-request-id", "")
        rid = incoming if incoming.isalnum() and len(incoming) <= 64 else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = rid
        start = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message)["X-Request-ID"] = rid
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - start
            route = getattr(scope.get("route"), "path", "unmatched")
            method = scope["method"]
            self.metrics.requests.labels(method, route, str(status)).inc()
            self.metrics.latency.labels(method, route).observe(elapsed)
            # Only method, route template and status: never bodies, headers or queries (C6).
            log.info("%s %s %d %.1fms", method, route, status, elapsed * 1000,
                     extra={"request_id": rid, "method": method, "route": route,
                            "status": status, "ms": round(elapsed * 1000, 1)})
