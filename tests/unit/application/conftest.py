"""Application tests' world: the service layer over SQLite with in-memory fakes of every port."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from application.bundle import BundleSource
from application.memory import NoRuns
from application.ports import RunIndex
from application.run_settings import RunSettings
from application.services import Services, build_services
from tests.builders import trial, upload_chats, volume
from tests.fakes import GOOD_KEY, FakeCompute, FakeObjectStore, FakeVault, FixedClock

SHA = "a" * 64


@dataclass
class Fakes:
    """The services and every fake port behind them."""

    services: Services
    compute: FakeCompute
    objects: FakeObjectStore
    vault: FakeVault
    clock: FixedClock


def new_services(
    tmp_path: Path,
    compute: FakeCompute | None = None,
    runs: RunIndex | None = None,
    vault: FakeVault | None = None,
    settings: RunSettings | None = None,
    bundle: BundleSource | None = None,
) -> Fakes:
    """The service layer over SQLite and fakes of every port, with no organization yet."""
    fakes = Fakes(
        services=None,  # type: ignore[arg-type] - built below, over these fakes
        compute=compute or FakeCompute(),
        objects=FakeObjectStore(),
        vault=vault or FakeVault(),
        clock=FixedClock(),
    )
    fakes.services = build_services(
        {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "e.db")},
        compute=fakes.compute,
        objects=fakes.objects,
        vault=fakes.vault,
        clock=fakes.clock,
        settings=settings
        or RunSettings(
            trainer_secret=b"k" * 32, max_termination_attempts=3, termination_backoff_s=1.0
        ),
        runs=runs or NoRuns(),
        bundle=bundle,
    )
    return fakes


World = tuple[Services, FakeCompute, FakeObjectStore, str, str]


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def make_world(tmp_path: Path) -> World:
    """An organization with compute, a bound volume, a project, a dataset and a trial draft."""
    fakes = new_services(tmp_path)
    org, run_id = seed_org(fakes.services)
    return fakes.services, fakes.compute, fakes.objects, org, run_id


def seed_org(services: Services) -> tuple[str, str]:
    """(organization, trial draft): compute connected, a volume bound, a project and a dataset."""
    org = services.organizations.create("Acme")
    services.connections.connect(org, "owner", GOOD_KEY)
    services.storage.bind_volume(org, "owner", volume())
    project, _ = services.projects.create(org, "owner", "bot")
    dv = upload_chats(services, org, project, "owner")
    run_id, _ = services.runs.draft(org, "owner", trial(project, dv))
    return org, run_id
