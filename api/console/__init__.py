"""The web console (W1): the guide's screens, served by the API's process from the same
services and views. `install(app)` mounts it; its routes are not part of the API document."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles

from api.console.routes import router
from api.console.sessions import SessionStore

STATIC = Path(__file__).parent / "static"


def install(app: FastAPI) -> None:
    app.state.console_sessions = SessionStore()
    app.mount("/console/static", StaticFiles(directory=STATIC), name="console-static")
    app.include_router(router)
