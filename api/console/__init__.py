"""The web console (W1): the guide's screens, served by the API's process from the same
services and views. One page module per resource, each over the actions the API's routes call
(`api.actions`); `install(app)` mounts them. Its routes are not part of the API document."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from api.console import (
    audit,
    billing,
    cleanup,
    configure,
    connections,
    deployments,
    invites,
    members,
    own_token,
    projects,
    runs,
    signin,
    webhooks,
    words,
)
from api.console.sessions import SessionStore
from api.console.web import TEMPLATES

STATIC = Path(__file__).parent / "static"
words.install(TEMPLATES.env)  # before any template is compiled
# `configure` before `runs`: /runs/new is a page of its own, not the run "new".
PAGES = (
    signin,
    connections,
    members,
    invites,
    own_token,
    webhooks,
    projects,
    configure,
    runs,
    deployments,
    cleanup,
    billing,
    audit,
)


def install(app: FastAPI) -> None:
    app.state.console_sessions = SessionStore()
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")
    for module in PAGES:
        app.include_router(module.router)
