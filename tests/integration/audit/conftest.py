"""An application with a realistic history on SQLite or PostgreSQL, and every view built."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from application.log import TensorantLog
from application.run_settings import RunSettings
from application.services import Services, build_services
from projections.store.base import ViewStore
from projections.store.engine import ProjectionSet, Projector
from projections.store.sqlite import SQLiteViewStore
from projections.store.urls import open_view_store
from projections.views.registry import all_projections
from tests.builders import custom_s3, volume
from tests.conftest import POSTGRES_URL
from tests.fakes import (
    GOOD_KEY,
    FakeCompute,
    FakeObjectStore,
    FakeVault,
    FixedClock,
)
from tests.integration.billing.history import OrgHistory, drive_history

VOLUME = volume()
CUSTOM = custom_s3()


@dataclass
class World:
    app: Services
    views: ViewStore
    projections: ProjectionSet
    orgs: list[OrgHistory]
    env: dict[str, str]

    def execute(self, sql: str, *params: Any) -> list[Any]:
        """Raw SQL on the event store's table, as an attacker with database access would."""
        table = self.app.log.recorder.events_table_name  # type: ignore[attr-defined]
        if self.env["PERSISTENCE_MODULE"].endswith("sqlite"):
            with sqlite3.connect(self.env["SQLITE_DBNAME"]) as conn:
                rows = conn.execute(sql.format(table=table), params).fetchall()
                conn.commit()
                return rows
        schema = self.env["POSTGRES_SCHEMA"]
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            cur = conn.execute(sql.replace("?", "%s").format(table=f'"{schema}".{table}'), params)
            return cur.fetchall() if cur.description else []

    @property
    def log(self) -> TensorantLog:
        return self.app.log

    @property
    def id_column(self) -> str:
        return "rowid" if self.env["PERSISTENCE_MODULE"].endswith("sqlite") else "notification_id"


@pytest.fixture
def world(event_store_env: dict[str, str], tmp_path: Path) -> Iterator[World]:
    clock = FixedClock()
    app = build_services(
        event_store_env,
        compute=FakeCompute(),
        objects=FakeObjectStore(),
        vault=FakeVault(),
        clock=clock,
        settings=RunSettings(trainer_secret=b"k" * 32),
    )
    if event_store_env["PERSISTENCE_MODULE"].endswith("sqlite"):
        views: ViewStore = SQLiteViewStore(str(tmp_path / "views.db"))
    else:
        views = open_view_store(f"{POSTGRES_URL}?schema={event_store_env['POSTGRES_SCHEMA']}")
    hists = drive_history(
        app,
        clock.advance,
        [("Acme", GOOD_KEY, VOLUME), ("Globex", GOOD_KEY, CUSTOM)],
        "NVIDIA A100 80GB PCIe",
        "1.64",
        days=2,
    )
    projections = ProjectionSet([Projector(app.log, views, p) for p in all_projections()])
    projections.run_once()
    try:
        yield World(app, views, projections, hists, event_store_env)
    finally:
        views.close()
        app.close()
