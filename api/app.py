"""The FastAPI application factory: the container is built in the lifespan, one router each."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api import console, docs_page, problems, route_gates
from api.body_limits import BodyCaps, BodyLimits
from api.client_address import TrustedProxies, parse_networks
from api.deps import Backend
from api.middleware import Metrics, RequestContext
from api.relative_redirects import RelativeRedirects
from api.routes import (
    audit,
    base_models,
    billing,
    cleanup,
    connections,
    deployments,
    gpus,
    identity,
    logs,
    ops,
    projects,
    runs,
    storage,
    trainer,
    webhooks,
)
from api.streams import StreamGate, StreamLimits
from api.throttle import Throttle

DESCRIPTION = (
    "Tensorant: bring your own RunPod account and storage, train adapters, account for every "
    "cent. Authenticate with `Authorization: Bearer <token>`. Every error is "
    "`application/problem+json` (RFC 9457) with a stable `type`."
)


def create_app(
    build: Callable[[], Backend],
    *,
    run_projectors: bool = True,
    owns_container: bool = True,
    run_reactions: bool = True,
) -> FastAPI:
    """`build` runs at startup (never at import); projector threads run in-process by default."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        container = build()
        app.state.container = container
        settings = getattr(container, "settings", None)
        if settings is not None:
            app.state.streams.limits = StreamLimits(
                per_caller=settings.stream_limit_per_caller,
                per_org=settings.stream_limit_per_org,
                total=settings.stream_limit_total,
                keepalive_s=settings.stream_keepalive_s,
            )
            app.state.auth_throttle = Throttle(
                "authentications", settings.auth_failure_limit, settings.failure_window_s
            )
            app.state.check_throttle = Throttle(
                "key or storage checks", settings.check_failure_limit, settings.failure_window_s
            )
            app.state.trusted_proxies = parse_networks(settings.trusted_proxies)
            app.state.body_caps = BodyCaps(
                default_bytes=settings.max_body_bytes,
                dataset_bytes=settings.max_dataset_bytes,
                read_timeout_s=settings.body_read_timeout_s,
            )
        container.start(projectors=run_projectors, reactions=run_reactions)
        try:
            yield
        finally:
            app.state.streams.close()
            if owns_container:
                container.close()
            elif run_projectors:
                container.stop_projectors()

    app = FastAPI(
        title="Tensorant",
        version="1",
        description=DESCRIPTION,
        lifespan=lifespan,
        docs_url=None,  # docs_page serves /docs from the package's assets, no CDN
        redoc_url=None,
    )
    app.state.metrics = Metrics()
    app.state.streams = StreamGate()  # limits from the container's settings at start-up
    app.state.metrics.open_streams.set_function(lambda: app.state.streams.open)
    app.state.body_caps = BodyCaps()  # these from the container's settings at start-up
    app.state.auth_throttle = Throttle("authentications")
    app.state.check_throttle = Throttle("key or storage checks", limit=5)
    app.state.trusted_proxies = ()  # X-Forwarded-For is read only from these peers (N7)
    app.add_middleware(RelativeRedirects)  # Location never built from the Host header
    app.add_middleware(BodyLimits)  # inside RequestContext: refusals get a request id too
    app.add_middleware(RequestContext, metrics=app.state.metrics)
    app.add_middleware(TrustedProxies)  # outermost: every layer sees the client's address
    problems.install(app)
    docs_page.install(app)
    for module in (
        ops,
        identity,
        connections,
        storage,
        projects,
        gpus,
        base_models,
        runs,
        logs,
        trainer,
        cleanup,
        billing,
        audit,
        webhooks,
        deployments,
    ):
        app.include_router(module.router)
    console.install(app)
    route_gates.install(app)
    return app
