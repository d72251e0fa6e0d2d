"""Injected faults reach the runpod SDK as RunPod's own failures do (QueryError, JSON errors)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import requests
from runpod.error import QueryError

from runpod_sandbox import Sandbox

NO_INSTANCES = (
    "There are no longer any instances available with the requested "
    "specifications. Please refresh and try again."
)


def test_a_non_json_answer_escapes_the_sdk_as_a_json_decode_error(
    sdk: Any, sandbox: Sandbox
) -> None:
    sandbox.set_faults(non_json_rate=1.0)
    with pytest.raises(requests.exceptions.JSONDecodeError):
        sdk.get_pods()


def test_a_500_with_errors_is_a_query_error(sdk: Any, sandbox: Sandbox) -> None:
    sandbox.set_faults(error_rate=1.0)
    with pytest.raises(QueryError, match="Something went wrong"):
        sdk.get_user()
    sandbox.set_faults({})
    assert sdk.get_user()["id"]


def test_a_429_carries_retry_after(sandbox: Sandbox) -> None:
    sandbox.set_faults(rate_limit_rate=1.0)
    answer = requests.post(
        f"{sandbox.base_url}/graphql",
        json={"query": "{ myself { id } }"},
        headers={"Authorization": f"Bearer {sandbox.credentials()['api_key']}"},
        timeout=5,
    )
    assert answer.status_code == 429
    assert answer.headers["Retry-After"] == "1"


def test_slow_answers_take_the_configured_delay(sdk: Any, sandbox: Sandbox) -> None:
    sandbox.set_faults(slow_rate=1.0, slow_seconds=0.3)
    started = time.monotonic()
    sdk.get_gpus()
    assert time.monotonic() - started >= 0.3


def test_capacity_faults_answer_runpods_exact_message(sdk: Any, sandbox: Sandbox) -> None:
    sandbox.set_faults(capacity_gpu_types=["NVIDIA A100 80GB PCIe"])
    with pytest.raises(QueryError) as caught:
        sdk.create_pod("cap", "img", "NVIDIA A100 80GB PCIe", data_center_id="EU-RO-1")
    assert str(caught.value) == NO_INSTANCES
    sandbox.set_faults(capacity_datacenters=["EU-RO-1"])
    with pytest.raises(QueryError, match="no longer any instances"):
        sdk.create_pod("cap", "img", "NVIDIA GeForce RTX 4090", network_volume_id="nv7eu1ro4k")
    assert sandbox.model.all_pods() == []


def test_a_gpu_with_no_stock_in_a_datacenter_cannot_be_created_there(sdk: Any) -> None:
    with pytest.raises(QueryError, match="no longer any instances"):
        sdk.create_pod("h100", "img", "NVIDIA H100 80GB HBM3", data_center_id="EU-RO-1")


def test_create_then_500_leaves_exactly_one_pod_findable_by_name(
    sdk: Any, sandbox: Sandbox
) -> None:
    sandbox.set_faults(create_then_500=1)
    with pytest.raises(QueryError):
        sdk.create_pod("tensorant-run-42", "img", "NVIDIA GeForce RTX 4090")
    named = [p for p in sdk.get_pods() if p["name"] == "tensorant-run-42"]
    assert len(named) == 1
    sdk.create_pod("tensorant-run-43", "img", "NVIDIA GeForce RTX 4090")  # counter consumed
    assert len(sdk.get_pods()) == 2


def test_listing_lag_hides_new_pods_from_myself_but_not_from_pod(
    sdk: Any, sandbox: Sandbox
) -> None:
    sandbox.set_faults(list_lag_seconds=30)
    pod_id = sdk.create_pod("lagging", "img", "NVIDIA GeForce RTX 4090")["id"]
    assert sdk.get_pods() == []
    assert sdk.get_pod(pod_id)["id"] == pod_id
    sandbox.advance_clock(31)
    assert [p["id"] for p in sdk.get_pods()] == [pod_id]


def test_a_vanished_pod_is_gone_without_anyone_terminating_it(sdk: Any, sandbox: Sandbox) -> None:
    pod_id = sdk.create_pod("vanishing", "img", "NVIDIA GeForce RTX 4090")["id"]
    requests.post(f"{sandbox.base_url}/_sandbox/faults", json={"vanish_pods": [pod_id]}, timeout=5)
    assert sdk.get_pod(pod_id) is None
    history = requests.get(f"{sandbox.base_url}/_sandbox/pods", timeout=5).json()["pods"]
    assert history[0]["status"] == "TERMINATED"
    assert history[0]["end_reason"] == "vanished"


def test_a_lying_terminate_answers_success_but_the_pod_stays(sdk: Any, sandbox: Sandbox) -> None:
    pod_id = sdk.create_pod("sticky", "img", "NVIDIA GeForce RTX 4090")["id"]
    sandbox.set_faults(terminate_lies=1)
    assert sdk.terminate_pod(pod_id) is None
    assert sdk.get_pod(pod_id)["desiredStatus"] == "RUNNING"
    sdk.terminate_pod(pod_id)
    assert sdk.get_pod(pod_id) is None


def test_resume_can_find_no_free_gpus(sdk: Any, sandbox: Sandbox) -> None:
    pod_id = sdk.create_pod("stuck", "img", "NVIDIA GeForce RTX 4090")["id"]
    sdk.stop_pod(pod_id)
    sandbox.set_faults(resume_no_gpus=True)
    with pytest.raises(QueryError, match="not enough free GPUs on the host machine"):
        sdk.resume_pod(pod_id, 1)
    assert sdk.get_pod(pod_id)["desiredStatus"] == "EXITED"


def test_faults_are_set_and_cleared_over_http(sandbox: Sandbox) -> None:
    url = f"{sandbox.base_url}/_sandbox/faults"
    set_ = requests.post(
        url, json={"error_rate": 0.5, "capacity_gpu_types": ["Tesla T4"]}, timeout=5
    ).json()
    assert set_["error_rate"] == 0.5
    assert set_["capacity_gpu_types"] == ["Tesla T4"]
    assert requests.post(url, json={}, timeout=5).json()["error_rate"] == 0.0
    assert requests.post(url, json={"error_rate": 2}, timeout=5).status_code == 400
