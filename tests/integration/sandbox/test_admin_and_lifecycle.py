"""Starting the sandbox, its seeded credentials, and the /_sandbox admin endpoints."""

from __future__ import annotations

import time
from typing import Any

import requests

from runpod_sandbox import Sandbox, seeded_credentials


def test_starting_and_stopping_a_sandbox_takes_well_under_a_second() -> None:
    started = time.perf_counter()
    sandbox = Sandbox().start()
    up = time.perf_counter() - started
    assert requests.get(f"{sandbox.base_url}/_sandbox/health", timeout=5).ok
    stopping = time.perf_counter()
    sandbox.stop()
    down = time.perf_counter() - stopping
    print(f"sandbox start {up * 1000:.0f} ms, stop {down * 1000:.0f} ms")
    assert up < 3
    assert down < 3


def test_seeded_credentials_are_the_same_without_a_server_and_on_every_start() -> None:
    offline = seeded_credentials(8181)
    with Sandbox(port=0) as first, Sandbox(port=0) as second:
        a, b = first.credentials(), second.credentials()
    assert a["api_key"] == b["api_key"] == offline["api_key"]
    assert offline["api_base_url"] == "http://127.0.0.1:8181"
    for key in (offline["api_key"], offline["read_only_api_key"]):
        assert key.startswith("rpa_")
        assert len(key) == 44
        assert key[4:].isupper()
    assert offline["api_key"] != offline["read_only_api_key"]
    assert offline["s3_access_key_id"].startswith("user_")
    assert offline["s3_secret_access_key"].startswith("rps_")
    assert offline["s3_endpoint_template"] == "http://127.0.0.1:8181/s3/{dc}"
    s3_by_dc = {v["dataCenterId"]: v["s3_api"] for v in offline["volumes"]}
    assert s3_by_dc == {"EU-RO-1": True, "US-KS-2": True, "CA-MTL-1": False}
    assert set(offline["custom_s3"]) == {
        "endpoint_url",
        "bucket",
        "region",
        "access_key_id",
        "secret_access_key",
    }


def test_the_clock_endpoint_moves_sandbox_time(sandbox: Sandbox) -> None:
    before = sandbox.clock.now()
    answer = requests.post(
        f"{sandbox.base_url}/_sandbox/clock", json={"advance_seconds": 7200}, timeout=5
    ).json()
    assert (sandbox.clock.now() - before).total_seconds() >= 7200
    assert answer["now"].endswith("Z")


def test_pods_made_outside_any_run_show_up_as_orphans_and_in_history(
    sdk: Any, sandbox: Sandbox
) -> None:
    made = requests.post(
        f"{sandbox.base_url}/_sandbox/pods",
        json={"name": "orphan", "gpu_type_id": "NVIDIA RTX A6000"},
        timeout=5,
    )
    assert made.status_code == 201
    pod_id = made.json()["id"]
    assert [p["name"] for p in sdk.get_pods()] == ["orphan"]
    gone = requests.post(f"{sandbox.base_url}/_sandbox/pods/{pod_id}/terminate", timeout=5)
    assert gone.ok
    assert sdk.get_pods() == []
    history = requests.get(f"{sandbox.base_url}/_sandbox/pods", timeout=5).json()["pods"]
    assert [(p["id"], p["status"], p["end_reason"]) for p in history] == [
        (pod_id, "TERMINATED", "console")
    ]


def test_pod_files_are_readable_only_while_the_pod_exists(sdk: Any, sandbox: Sandbox) -> None:
    url = f"{sandbox.base_url}/_sandbox/pods/nosuchpod/files/workspace/data/adapter.zip"
    assert requests.get(url, timeout=5).status_code == 404


def test_scenario_endpoint_rejects_unknown_scenarios(sandbox: Sandbox) -> None:
    url = f"{sandbox.base_url}/_sandbox/scenario"
    assert requests.post(url, json={"scenario": "explode"}, timeout=5).status_code == 400
    assert requests.post(url, json={"scenario": "hang", "count": 2}, timeout=5).json() == {
        "scenario": "hang",
        "count": 2,
    }
