"""The path-prefix gates in front of the included routers (`api.route_gates`) change
nothing about which route a request reaches, and spare the routers a path cannot be theirs."""

from __future__ import annotations

import re
from typing import Any

import pytest
from fastapi.openapi.utils import get_openapi
from starlette.routing import Match

from api import route_gates
from api.app import create_app


def _first_match(app: Any, method: str, path: str) -> tuple[Match, Any]:
    """What the app's top-level router picks for the request, as FastAPI's loop does."""
    scope = {"type": "http", "method": method, "path": path, "root_path": "", "headers": []}
    partial = None
    for route in app.router.routes:
        match, _ = route.matches(scope)
        if match == Match.FULL:
            return match, route
        if match == Match.PARTIAL and partial is None:
            partial = route
    return (Match.PARTIAL, partial) if partial is not None else (Match.NONE, None)


def _requests(app: Any) -> list[tuple[str, str]]:
    """One concrete request per route of the app (parameters filled in), plus misses."""
    found: list[tuple[str, str]] = []
    for spec in get_openapi(title="t", version="1", routes=app.routes)["paths"].items():
        path, operations = spec
        concrete = re.sub(r"\{[^}]+\}", "x1", path)
        found += [(method.upper(), concrete) for method in operations]
    console = ["/", "/runs", "/runs/x1", "/runs/x1/logs/stream", "/billing/export", "/audit"]
    found += [("GET", p) for p in console]
    found += [("DELETE", "/runs"), ("GET", "/nowhere"), ("GET", "/v1/nowhere"), ("GET", "/v1")]
    return found


def test_every_request_reaches_the_route_it_reached_without_the_gates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gated = create_app(lambda: None)
    monkeypatch.setattr(route_gates, "install", lambda app: None)
    plain = create_app(lambda: None)
    requests = _requests(plain)
    assert len(requests) >= 50
    for method, path in requests:
        match, route = _first_match(gated, method, path)
        plain_match, plain_route = _first_match(plain, method, path)
        assert match == plain_match, (method, path)
        # the same router of the same position (each app has its own route objects)
        index = gated.router.routes.index(route) if route is not None else None
        plain_index = plain.router.routes.index(plain_route) if plain_route is not None else None
        assert index == plain_index, (method, path)


def test_a_console_page_is_found_without_scanning_the_api_routers() -> None:
    app = create_app(lambda: None)
    scanned: list[Any] = []
    for route in app.router.routes:
        router = getattr(route, "original_router", None)
        if router is not None:
            inner = router.matches

            def spy(scope: Any, inner: Any = inner, router: Any = router) -> Any:
                scanned.append(router)
                return inner(scope)

            router.matches = spy  # what a gate lets through goes on to the router's own scan
    match, route = _first_match(app, "GET", "/runs")
    assert match == Match.FULL
    api_routers = [r for r in scanned if str(getattr(r, "prefix", "")).startswith("/v1")]
    assert api_routers == []  # none of the thirteen /v1 routers was asked
    assert getattr(route, "original_router", None) in scanned  # the console's was
