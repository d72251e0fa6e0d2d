"""A sandbox with a frozen clock at a UTC midnight, and the container wired to it."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from application.storage import BindCustomS3, BindVolume
from entrypoints.bootstrap import Container, build_for_sandbox
from entrypoints.settings import Settings
from runpod_sandbox import Sandbox, SandboxClock
from tests.integration.billing.history import OrgHistory, drive_history

T0 = datetime(2026, 11, 1, tzinfo=UTC)
DAYS = 30


def frozen_clock(start: datetime) -> SandboxClock:
    clock = SandboxClock(start)
    clock.freeze()
    clock._offset = -clock._elapsed()  # exactly `start`: the volumes' billing hours align to UTC
    return clock


@dataclass
class SandboxWorld:
    sandbox: Sandbox
    container: Container
    orgs: list[OrgHistory]


@pytest.fixture(scope="package")
def sandbox_month(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxWorld]:
    """Two organizations over a month against the sandbox: RunPod's ledger is the truth."""
    data: Path = tmp_path_factory.mktemp("billing")
    sandbox = Sandbox(startup_seconds=0, clock=frozen_clock(T0)).start()
    sandbox.model.add_credit(100_000)
    sandbox.set_scenario("hang", 100)
    container = build_for_sandbox(Settings(data_dir=data), sandbox)
    creds: dict[str, Any] = sandbox.credentials()
    volume = next(v for v in creds["volumes"] if v["dataCenterId"] == "EU-RO-1")
    custom = creds["custom_s3"]
    orgs: list[tuple[str, str, BindVolume | BindCustomS3]] = [
        (
            "Acme",
            creds["api_key"],
            BindVolume(
                volume["id"], "EU-RO-1", creds["s3_access_key_id"], creds["s3_secret_access_key"]
            ),
        ),
        (
            "Globex",
            creds["api_key"],
            BindCustomS3(
                custom["endpoint_url"],
                custom["bucket"],
                custom["region"],
                custom["access_key_id"],
                custom["secret_access_key"],
            ),
        ),
    ]
    try:
        billed_volume = sandbox.model.volumes[volume["id"]]

        def resize_did_not_take() -> None:
            # RunPod keeps billing the old size (a resize undone in its console): our estimate
            # and the bill differ for every later hour, and the report must list each one.
            billed_volume.size_gb = 100

        hists = drive_history(
            container.services,
            sandbox.advance_clock,
            orgs,
            "NVIDIA A100 80GB PCIe",
            "1.64",
            DAYS,
            after_resize=resize_did_not_take,
        )
        container.catch_up()
        yield SandboxWorld(sandbox, container, hists)
    finally:
        container.close()
        sandbox.stop()
