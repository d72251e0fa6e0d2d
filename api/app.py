"""The FastAPI application factory: the container is built in the lifespan, one router each."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from fastapi import FastAPI

from api import console, problems
from api.deps import Backend
from api.middleware import Metrics, RequestContext
from api.routes import (
    audit,
    base_models,
    billing,
    cleanup,
    connections,
    gpus,
    identity,
    logs,
    ops,
    projects,
    runs,
    storage,
    trainer,
)

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
        container.start(projectors=run_projectors, reactions=run_reactions)
        try:
            yield
        finally:
            if owns_container:
                container.close()
            elif run_projectors:
                container.stop_projectors()

    app = FastAPI(title="Tensorant", version="1", description=DESCRIPTION, lifespan=lifespan)
    app.state.metrics = Metrics()
    app.add_middleware(RequestContext, metrics=app.state.metrics)
    problems.install(app)
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
    ):
        app.include_router(module.router)
    console.install(app)
    return app
