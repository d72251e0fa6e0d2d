"""Request ids, one structured log line per request, and Prometheus request metrics (O3)."""

from __future__ import annotations

import logging
import time
import uuid
from urllib.parse import unquote_plus

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.problems import problem_response

log = logging.getLogger("tensorant.http")


class Metrics:
    """A registry per app, so several apps in one process (tests) do not collide."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "tensorant_http_requests",
            "HTTP requests",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "tensorant_http_request_seconds",
            "HTTP request latency",
            ["method", "route"],
            registry=self.registry,
        )
        self.open_streams = Gauge(
            "tensorant_open_streams", "Log streams (SSE) open now", registry=self.registry
        )


def _has_control_characters(scope: Scope) -> bool:
    path = scope.get("path", "")
    query = unquote_plus(scope.get("query_string", b"").decode("latin-1"))
    return any(ord(c) < 0x20 or ord(c) == 0x7F for c in path + query)


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
            if _has_control_characters(scope):
                # Ids and filters with NUL or other control bytes cannot name anything we store.
                await problem_response(
                    422,
                    "validation-error",
                    "The request is not valid",
                    "the path or query contains control characters",
                )(scope, receive, send_with_id)
                return
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - start
            route = getattr(scope.get("route"), "path", "unmatched")
            method = scope["method"]
            self.metrics.requests.labels(method, route, str(status)).inc()
            self.metrics.latency.labels(method, route).observe(elapsed)
            # Only method, route template and status: never bodies, headers or queries (C6).
            log.info(
                "%s %s %d %.1fms",
                method,
                route,
                status,
                elapsed * 1000,
                extra={
                    "request_id": rid,
                    "method": method,
                    "route": route,
                    "status": status,
                    "ms": round(elapsed * 1000, 1),
                },
            )
