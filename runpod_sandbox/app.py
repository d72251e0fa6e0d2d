"""The sandbox's ASGI app: GraphQL, REST v2 (rate-limited), admin routes, S3 mounts, faults."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from . import admin, hub, rest_v2, rest_v2_volumes, seed, serverless
from .billing_api import v2_billing_pods, v2_billing_serverless, v2_billing_volumes
from .faults import SOMETHING_WENT_WRONG
from .graphql_api import graphql_endpoint
from .model import SandboxModel
from .ratelimit import RateLimitMiddleware
from .tenants import TenantMiddleware

BAD_GATEWAY_HTML = (
    "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway"
    "</h1></center><hr><center>cloudflare</center></body></html>"
)


class FaultInjection:
    """Answers some /graphql and /v2 calls badly, as RunPod's edge sometimes does."""

    def __init__(self, app: ASGIApp, model: SandboxModel) -> None:
        self.app = app
        self.model = model

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path == "/graphql" and self.model.faults.graphql_retired:
            await _problem(410, "Gone", "The GraphQL API has been retired; use REST v2.")(
                scope, receive, send
            )
            return
        if path == "/graphql" or path.startswith("/v2/"):
            answer = await self._fault(path.startswith("/v2/"))
            if answer is not None:
                await answer(scope, receive, send)
                return
        await self.app(scope, receive, send)

    async def _fault(self, rest: bool) -> Response | None:
        f, m = self.model.faults, self.model
        if m.draw(f.slow_rate):
            await asyncio.sleep(f.slow_seconds)
        if m.draw(f.non_json_rate):
            return HTMLResponse(BAD_GATEWAY_HTML, status_code=502)
        if m.draw(f.rate_limit_rate):
            headers = {"Retry-After": "1"}
            if rest:
                return _problem(
                    429, "Too Many Requests", "rate limit exceeded for the minute window", headers
                )
            return JSONResponse({"errors": [{"message": "Too many requests"}]}, 429, headers)
        if m.draw(f.error_rate):
            if rest:
                return _problem(500, "Internal Server Error", "Something went wrong.")
            return JSONResponse({"errors": [{"message": SOMETHING_WENT_WRONG}]}, status_code=500)
        return None


def _problem(
    status: int, title: str, detail: str, headers: dict[str, str] | None = None
) -> Response:
    body = json.dumps({"title": title, "status": status, "detail": detail})
    return Response(
        body, status_code=status, headers=headers, media_type="application/problem+json"
    )


async def health(_request: Request) -> Response:
    return JSONResponse({"ok": True})


def build_app(
    model: SandboxModel,
    credentials: dict[str, Any],
    mounts: list[tuple[str, ASGIApp]],
    hub_state: hub.Hub | None = None,
) -> ASGIApp:
    routes = [
        Route("/graphql", graphql_endpoint, methods=["POST"]),
        Route("/v2/billing/pods", v2_billing_pods, methods=["GET"]),
        Route("/v2/billing/network-volumes", v2_billing_volumes, methods=["GET"]),
        Route("/v2/billing/serverless", v2_billing_serverless, methods=["GET"]),
        *rest_v2.routes,
        *rest_v2_volumes.routes,
        *serverless.routes,
        Route("/_sandbox/health", health, methods=["GET"]),
        *admin.routes,
        *hub.admin_routes,
        Mount(seed.HUB_MOUNT, routes=hub.routes),
        *[Mount(prefix, app=sub) for prefix, sub in mounts],
    ]
    app = Starlette(routes=routes)
    app.state.model = model
    app.state.hub = hub_state or hub.Hub()
    if model.serverless is None:
        model.serverless = serverless.Serverless(model)
    app.state.serverless = model.serverless
    app.state.credentials = credentials
    limited = RateLimitMiddleware(
        app, model.rate_limiter, model, (seed.API_KEY, seed.READ_ONLY_API_KEY)
    )
    return TenantMiddleware(FaultInjection(limited, model))
