"""Application tests' world: the service layer over SQLite with in-memory fakes of every port."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from application.runs import RunSettings
from application.service import TensorantApp
from tests.fakes import (
    GOOD_KEY,
    S3_ACCESS,
    S3_SECRET,
    FakeCompute,
    FakeObjectStore,
    FakeVault,
    FixedClock,
)

SHA = "a" * 64


def adapter_zip(ok: bool = True) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("adapter_config.json", "{}")
        if ok:
            z.writestr("adapter_model.safetensors", b"\0" * 64)
    return buf.getvalue()


World = tuple[TensorantApp, FakeCompute, FakeObjectStore, str, str]


@pytest.fixture
def world(tmp_path: Path) -> World:
    return make_world(tmp_path)


def new_app(
    tmp_path: Path, compute: FakeCompute | None = None
) -> tuple[TensorantApp, FakeCompute, FakeObjectStore, FixedClock]:
    """The service layer over SQLite and fakes of every port, with no organization yet."""
    compute, objects, clock = compute or FakeCompute(), FakeObjectStore(), FixedClock()
    app = TensorantApp(
        env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "e.db")},
        compute=compute,
        objects=objects,
        vault=FakeVault(),
        clock=clock,
        run_settings=RunSettings(
            trainer_secret=b"k" * 32, max_termination_attempts=3, termination_backoff_s=1.0
        ),
    )
    return app, compute, objects, clock


def make_world(tmp_path: Path) -> World:
    """An organization with compute, a bound volume, a project, a dataset and a trial draft."""
    app, compute, objects, _ = new_app(tmp_path)
    org, run_id = seed_org(app)
    return app, compute, objects, org, run_id


def seed_org(app: TensorantApp) -> tuple[str, str]:
    """(organization, trial draft): compute connected, a volume bound, a project and a dataset."""
    org = app.create_organization("Acme")
    app.connect_runpod(org, "owner", GOOD_KEY)
    app.bind_storage(
        org,
        "owner",
        {
            "kind": "runpod_volume",
            "volume_id": "vol1euro",
            "datacenter_id": "EU-RO-1",
            "access_key_id": S3_ACCESS,
            "secret_access_key": S3_SECRET,
        },
    )
    project, _ = app.create_project(org, "owner", "bot")
    dv, _ = app.register_dataset_version(
        org,
        project,
        "owner",
        name="chats",
        version="1",
        object_key="d/chats.jsonl",
        size_bytes=10,
        row_count=3,
        sha256=SHA,
    )
    config = {
        "project_id": project,
        "dataset_version_id": dv,
        "kind": "trial",
        "base_model": "meta-llama/Llama-3.1-8B-Instruct",
        "gpu_type_id": "NVIDIA A100 80GB PCIe",
        "gpu_count": 1,
        "price_limit_per_hour": "2.00",
        "max_runtime_minutes": 60,
    }
    run_id, _ = app.draft_run(org, "owner", config)
    return org, run_id
