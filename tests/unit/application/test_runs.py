"""The run reactor with in-memory fakes: launch, verify, release, stop and retain, recovery."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path

import pytest

from application.runs import AvailabilityChanged, LowBalance, PriceAboveLimit, RunSettings, pod_name
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


@pytest.fixture
def world(tmp_path: Path) -> tuple[TensorantApp, FakeCompute, FakeObjectStore, str, str]:
    compute, objects = FakeCompute(), FakeObjectStore()
    app = TensorantApp(
        env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "e.db")},
        compute=compute,
        objects=objects,
        vault=FakeVault(),
        clock=FixedClock(),
        run_settings=RunSettings(trainer_secret=b"k" * 32),
    )
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
    return app, compute, objects, org, run_id


def test_r5_r7_a_trial_launches_one_pod_verifies_the_adapter_and_releases_it(world) -> None:  # type: ignore[no-untyped-def]
    app, compute, objects, org, run_id = world
    app.launch_run(org, run_id, "owner", True, "1.64")
    app.drive_run(run_id)
    app.drive_run(run_id)  # a duplicate message changes nothing
    run = app.run(org, run_id)
    assert run.state == "running" and len(compute.pods) == 1
    assert compute.find_pod_by_name(GOOD_KEY, pod_name(run_id)) is not None
    data = adapter_zip()
    objects.buckets["vol1euro"][f"runs/{run_id}/adapter.zip"] = data
    token = app.trainer_token(run_id)
    app.trainer_progress(run_id, token, "training")
    app.trainer_exported(
        run_id, token, f"runs/{run_id}/adapter.zip", hashlib.sha256(data).hexdigest(), len(data)
    )
    app.drive_run(run_id)
    run = app.run(org, run_id)
    assert run.state == "succeeded" and compute.pods == {}
    assert app.connection(org).write_permission == "proven"


def test_r7_a_corrupt_adapter_stops_and_retains_the_pod(world) -> None:  # type: ignore[no-untyped-def]
    app, compute, objects, org, run_id = world
    app.launch_run(org, run_id, "owner", True, "1.64")
    app.drive_run(run_id)
    bad = b"not a zip"
    objects.buckets["vol1euro"][f"runs/{run_id}/adapter.zip"] = bad
    app.trainer_exported(
        run_id,
        app.trainer_token(run_id),
        f"runs/{run_id}/adapter.zip",
        hashlib.sha256(bad).hexdigest(),
        len(bad),
    )
    app.drive_run(run_id)
    run = app.run(org, run_id)
    assert (run.state, run.state_reason, run.pod_status) == (
        "needs_recovery",
        "adapter_invalid",
        "stopped",
    )
    assert [c for c, _ in compute.calls] == ["launch", "stop"]


def test_r8_r9_export_failure_then_verify_the_saved_adapter(world) -> None:  # type: ignore[no-untyped-def]
    app, compute, objects, org, run_id = world
    app.launch_run(org, run_id, "owner", True, "1.64")
    app.drive_run(run_id)
    app.trainer_failed(run_id, app.trainer_token(run_id), "export_failed", "upload timed out")
    app.drive_run(run_id)
    assert app.run(org, run_id).state == "needs_recovery"
    objects.buckets["vol1euro"][f"runs/{run_id}/adapter.zip"] = adapter_zip()
    app.recover_from_volume(org, run_id, "owner")
    app.drive_run(run_id)
    assert app.run(org, run_id).state == "succeeded"


def test_r4_launch_refusals_are_recorded_and_leave_a_draft(world) -> None:  # type: ignore[no-untyped-def]
    app, compute, _, org, run_id = world
    compute.gpus[0] = type(compute.gpus[0])(
        "NVIDIA A100 80GB PCIe",
        "A100",
        80,
        __import__("decimal").Decimal("2.50"),
        {"EU-RO-1": "High"},
    )
    with pytest.raises(PriceAboveLimit):
        app.launch_run(org, run_id, "owner", True, "2.50")
    compute.gpus[0] = type(compute.gpus[0])(
        "NVIDIA A100 80GB PCIe",
        "A100",
        80,
        __import__("decimal").Decimal("1.64"),
        {"US-KS-2": "High"},
    )
    with pytest.raises(AvailabilityChanged):
        app.launch_run(org, run_id, "owner", True, "1.64")
    compute.gpus[0] = type(compute.gpus[0])(
        "NVIDIA A100 80GB PCIe",
        "A100",
        80,
        __import__("decimal").Decimal("1.64"),
        {"EU-RO-1": "High"},
    )
    compute.balance = __import__("decimal").Decimal("1.00")
    with pytest.raises(LowBalance):
        app.launch_run(org, run_id, "owner", True, "1.64")
    assert app.run(org, run_id).state == "draft"


def test_r12_cancel_while_running_terminates_the_pod(world) -> None:  # type: ignore[no-untyped-def]
    app, compute, _, org, run_id = world
    app.launch_run(org, run_id, "owner", True, "1.64")
    app.drive_run(run_id)
    app.cancel_run(org, run_id, "owner")
    app.drive_run(run_id)
    assert app.run(org, run_id).state == "cancelled" and compute.pods == {}


def test_a_trainer_token_is_useless_for_another_run(world) -> None:  # type: ignore[no-untyped-def]
    app, _, _, org, run_id = world
    other, _ = app.draft_run(org, "owner", app.run(org, run_id).config)
    with pytest.raises(Exception, match="not found"):
        app.trainer_progress(other, app.trainer_token(run_id), "training")
