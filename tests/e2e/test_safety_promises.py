"""Promises that no test held before, each driven the way a user meets it:
the balance warning (K1), the "views behind" answer (read-your-writes), a GPU gone between
saving and launching (R4), a reconcile right after a RunPod error (K2), and an exported
adapter whose reported sha256 or size is wrong (R7).
(The runtime limit stopping rather than terminating the Pod is in test_runs.py.)
"""

from __future__ import annotations

import hashlib
import io
import sqlite3
import time
import zipfile
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from typing import Any

import pytest

from projections.views.indexes import last_reconciled
from tests.e2e.conftest import Api, Org, problem
from tests.e2e.flows import (
    A100,
    HOURS_PER_MONTH,
    RunPodConsole,
    draft,
    history,
    launch,
    private_stack,
    ready,
    until,
    volume_objects,
    wait_state,
)

WARNING_DAYS = 3  # TENSORANT_BALANCE_WARNING_DAYS for this module's server
VOLUME_GB = 100  # the seeded volume `ready` binds (nv7eu1ro4k, EU-RO-1)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, RunPodConsole]]:
    with private_stack(
        tmp_path_factory,
        "promises",
        settings={"balance_warning_days": WARNING_DAYS, "account_refresh_interval": 0.5},
    ) as pair:
        yield pair


def creds(api: Api) -> dict[str, Any]:
    return api.sandbox.credentials()


# ------------------------------------------------------------------------------ K1 warning


def warning(org: Org) -> str | None:
    body = org.member.get("/v1/cleanup").json()
    found: str | None = body["balance_warning"]
    return found


def expect_warning(org: Org, console: RunPodConsole, balance: Decimal, wanted: bool) -> None:
    """RunPod's balance moves (spending, a deposit); the reconciler reads it and the warning
    follows within a few reconcile intervals."""
    console.set_balance(balance)
    until(
        lambda: (warning(org) is not None) == wanted,
        timeout=10,
        what=f"the balance warning {'issued' if wanted else 'gone'} at ${balance}",
    )
    if wanted:
        assert "balance" in (warning(org) or "")


def test_k1_the_balance_warning_compares_the_balance_with_days_of_pods_and_storage(
    stack: tuple[Api, RunPodConsole],
) -> None:
    api, console = stack
    org, config = ready(api, creds(api))
    horizon = WARNING_DAYS * 24  # hours the balance must cover
    # Only the network volume bills: $0.07/GB-month.
    storage = VOLUME_GB * Decimal("0.07") / HOURS_PER_MONTH
    assert warning(org) is None  # $250 covers years of a 100 GB volume
    try:
        balances_against_burn(org, config, console, storage, horizon)
    finally:
        console.set_balance(Decimal(250))


def balances_against_burn(
    org: Org, config: dict[str, Any], console: RunPodConsole, storage: Decimal, horizon: int
) -> None:
    expect_warning(
        org, console, (storage * horizon * Decimal("0.9")).quantize(Decimal("0.01")), True
    )
    expect_warning(
        org, console, (storage * horizon * Decimal("1.1")).quantize(Decimal("0.01")), False
    )
    # A running A100 ($1.64/h) with its 20 GB container disk ($0.10/GB-month) on top.
    console.set_balance(Decimal(200))
    run = draft(org, config)
    console.scenario("hang", 1)
    launch(org, run["id"])
    wait_state(org, run["id"], "running")
    burn = storage + Decimal("1.64") + 20 * Decimal("0.10") / HOURS_PER_MONTH
    expect_warning(
        org, console, (burn * horizon * Decimal("1.08")).quantize(Decimal("0.01")), False
    )
    expect_warning(org, console, (burn * horizon * Decimal("0.92")).quantize(Decimal("0.01")), True)
    assert org.member.post(f"/v1/runs/{run['id']}/cancel").status_code == 202


# ------------------------------------------------------------------------------ R4 availability


def test_r4_a_gpu_gone_between_saving_and_launching_is_refused_and_recorded(
    stack: tuple[Api, RunPodConsole],
) -> None:
    api, console = stack
    org, config = ready(api, creds(api))
    run = draft(org, config)
    console.http.post("/_sandbox/stock", json={A100: "None"}).raise_for_status()
    try:
        r = org.member.post(
            f"/v1/runs/{run['id']}/launch",
            json={"confirm": True, "accepted_price_per_hour": "1.64"},
        )
    finally:
        console.http.post("/_sandbox/stock", json={A100: None}).raise_for_status()
    body = problem(r, 409, "availability-changed")
    assert A100 in body["detail"]
    shown = org.member.get(f"/v1/runs/{run['id']}").json()
    assert shown["state"] == "draft" and shown["pod_id"] is None
    assert shown["state_reason"] == "availability-changed"
    refusals = [e for e in history(org, run["id"]) if e["type"] == "LaunchRejected"]
    assert [e["data"]["reason"] for e in refusals] == ["availability-changed"]
    api.after_reconcile_passes()  # each pass drives every live run: a launched one made a Pod
    assert console.pods_of_run(run["id"]) == []
    assert org.member.get(f"/v1/runs/{run['id']}").json()["state"] == "draft"
    # Back in stock: the same draft launches.
    launch(org, run["id"])
    wait_state(org, run["id"], "succeeded")
    assert len(console.pods_of_run(run["id"])) == 1


# ------------------------------------------------------------------------------ read-your-writes


@pytest.fixture(scope="module")
def slow_views(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, RunPodConsole]]:
    with private_stack(
        tmp_path_factory, "slow-views", settings={"read_your_writes_timeout": 0.5}
    ) as pair:
        yield pair


def test_a_command_whose_views_do_not_catch_up_answers_503_views_behind_and_is_kept(
    slow_views: tuple[Api, RunPodConsole],
) -> None:
    """The view database is busy (another writer holds it) for longer than
    TENSORANT_READ_YOUR_WRITES_TIMEOUT: the command is recorded, the answer says the views are
    behind, and the next GETs show the change once the views catch up."""
    api, _ = slow_views
    org = api.new_org()
    key = {"api_key": creds(api)["api_key"]}
    views = sqlite3.connect(api.settings.data_dir / "views.db", timeout=5, isolation_level=None)
    views.execute("BEGIN IMMEDIATE")  # readers go on (WAL); no projector can write
    try:
        started = time.monotonic()
        r = org.owner.post("/v1/connections/runpod", json=key)
        waited = time.monotonic() - started
    finally:
        views.rollback()
        views.close()
    body = problem(r, 503, "views-behind")
    assert "retry" in body["detail"]
    assert waited >= 0.5, waited
    card = until(
        lambda: (
            (c := org.member.get("/v1/connections").json()["compute"])["status"] == "connected"
            and c
        ),
        what="the connection in the views",
    )
    assert card["account_id"] == creds(api)["account_id"]


# ------------------------------------------------------------------------------ K2 after errors


@pytest.fixture(scope="module")
def no_ticks(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, RunPodConsole]]:
    """A periodic reconcile only once in about eleven days: whatever is reconciled here, an
    error made it happen."""
    with private_stack(tmp_path_factory, "no-ticks", reconcile_interval=1e6) as pair:
        yield pair


def test_k2_a_runpod_error_while_driving_a_run_reconciles_the_organization_at_once(
    no_ticks: tuple[Api, RunPodConsole],
) -> None:
    api, console = no_ticks
    org, config = ready(api, creds(api))
    first = draft(org, config)
    console.scenario("hang", 1)
    launch(org, first["id"])
    pod_id = wait_state(org, first["id"], "running")["pod_id"]
    ticked = last_reconciled(api.container.views)  # the stack's last periodic pass
    console.vanish(pod_id)  # gone at RunPod; nothing of ours did it
    api.container.catch_up()
    assert org.member.get(f"/v1/runs/{first['id']}").json()["state"] == "running"  # not seen yet
    # The user deletes the network volume in RunPod's console: RunPod refuses the next create.
    volume_id = org.member.get("/v1/connections").json()["storage"]["volume_id"]
    assert console.rest("DELETE", f"/network-volumes/{volume_id}").status_code == 204
    second = draft(org, config)
    launch(org, second["id"])  # the worker's create fails: a RunPod error while driving it
    started = time.monotonic()
    body = wait_state(org, first["id"], "failed", timeout=10)
    assert body["state_reason"] == "pod_vanished", body
    assert time.monotonic() - started < 8
    [vanished] = [e for e in history(org, first["id"]) if e["type"] == "PodVanished"]
    # Seen only after the second launch was asked for, and by no periodic pass: the error did it.
    [asked] = [e for e in history(org, second["id"]) if e["type"] == "LaunchConfirmed"]
    assert datetime.fromisoformat(vanished["time"]) >= datetime.fromisoformat(asked["time"])
    assert last_reconciled(api.container.views) == ticked


# ------------------------------------------------------------------------------ R7 sha256, size


def test_r7_a_valid_adapter_reported_with_a_wrong_sha256_or_size_is_refused_and_the_pod_kept(
    stack: tuple[Api, RunPodConsole],
) -> None:
    """The trainer's report is checked against the object in storage, not only the zip: a good
    adapter.zip (config and weights, from a run that succeeded) whose reported sha256 or size
    is wrong stops the Pod and keeps it for recovery; the same bytes reported truly pass."""
    api, console = stack
    org, config = ready(api, creds(api))
    source = draft(org, config)
    launch(org, source["id"])
    exported = wait_state(org, source["id"], "succeeded")["adapter"]
    bucket = org.member.get("/v1/connections").json()["storage"]["bucket"]
    s3 = volume_objects(creds(api))
    data = s3.get_object(Bucket=bucket, Key=exported["object_key"])["Body"].read()
    assert hashlib.sha256(data).hexdigest() == exported["sha256"]
    names = set(zipfile.ZipFile(io.BytesIO(data)).namelist())
    assert {"adapter_config.json", "adapter_model.safetensors"} <= names
    true_sha, other_sha = hashlib.sha256(data).hexdigest(), hashlib.sha256(b"other").hexdigest()
    reports = {
        "truthful": (true_sha, len(data)),
        "wrong sha256": (other_sha, len(data)),
        "wrong size": (true_sha, len(data) + 1),
    }
    runs = {what: draft(org, config)["id"] for what in reports}
    console.scenario("hang", len(runs))  # trains, then never reports an export by itself
    for run_id in runs.values():
        launch(org, run_id)
    for what, (sha, size) in reports.items():
        run_id = runs[what]
        pod_id = wait_state(org, run_id, "running")["pod_id"]
        key = f"runs/{run_id}/adapter.zip"
        s3.put_object(Bucket=bucket, Key=key, Body=data)
        trainer = api.client(console.pod(pod_id)["env"]["TENSORANT_RUN_TOKEN"])
        r = trainer.post(
            f"/v1/trainer/runs/{run_id}/exported",
            json={"object_key": key, "sha256": sha, "size_bytes": size},
        )
        assert r.status_code == 202, r.text
    wait_state(org, runs["truthful"], "succeeded")
    kept = cleanup_pods(org)
    for what, word, reason in (
        ("wrong sha256", "sha256", "adapter_sha256_mismatch"),
        ("wrong size", "reported", "adapter_size_mismatch"),
    ):
        run_id = runs[what]
        body = wait_state(org, run_id, "needs_recovery")
        assert body["state_reason"] == reason, (what, body)
        assert body["cleanup"]["pod_status"] == "stopped" and body["adapter"] is None
        refusals = [e for e in history(org, run_id) if e["type"] == "AdapterVerificationFailed"]
        assert len(refusals) == 1 and word in refusals[0]["data"]["detail"], (what, refusals)
        [pod] = console.pods_of_run(run_id)
        assert pod["status"] == "EXITED", (what, pod)  # stopped with its files, not terminated
        assert (kept := cleanup_pods(org)).get(pod["id"]) == "retained", (what, kept)


def cleanup_pods(org: Org) -> dict[str, str]:
    return {i["pod_id"]: i["kind"] for i in org.member.get("/v1/cleanup").json()["items"]}
