"""The sandbox places Pods by their hosts' CUDA versions as RunPod does (minCudaVersion is a
floor, allowedCudaVersions an exact set), lists RunPod's placeholder GPU type, and can hold a
create's answer (the Pod exists) or fail Pod listings, for crash tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from runpod.api.graphql import run_graphql_query
from runpod.error import QueryError

from runpod_sandbox import Sandbox

RTX = "NVIDIA GeForce RTX 4090"


@pytest.fixture
def api(sandbox: Sandbox) -> Iterator[httpx.Client]:
    key = sandbox.credentials()["api_key"]
    with httpx.Client(
        base_url=sandbox.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=10
    ) as client:
        yield client


def rest_create(api: httpx.Client, name: str, dc: str, **gpu: Any) -> httpx.Response:
    body = {"name": name, "image": "img", "gpu": {"id": RTX, "count": 1, **gpu}}
    return api.post("/v2/pods", json={**body, "dataCenterIds": [dc]})


def graphql_create(sdk: Any, name: str, dc: str, cuda: str) -> dict[str, Any]:
    """podFindAndDeployOnDemand with an input field, as runpodctl sends minCudaVersion."""
    mutation = (
        f'mutation {{ podFindAndDeployOnDemand(input: {{name: "{name}", imageName: "img", '
        f'gpuTypeId: "{RTX}", cloudType: SECURE, gpuCount: 1, dataCenterId: "{dc}", {cuda}}}) '
        "{ id } }"
    )
    return dict(run_graphql_query(mutation)["data"]["podFindAndDeployOnDemand"])


def cuda_of(sandbox: Sandbox, pod_id: str) -> str:
    return sandbox.model.pods[pod_id].cuda_version


def test_a_minimum_cuda_version_admits_newer_hosts_on_both_apis(
    api: httpx.Client, sdk: Any, sandbox: Sandbox
) -> None:
    made = rest_create(api, "rest-min", "EUR-IS-1", minCudaVersion="13.0")
    assert made.status_code == 201, made.text
    assert made.json()["cudaVersion"] == "13.1"
    pod = graphql_create(sdk, "gql-min", "EUR-IS-1", 'minCudaVersion: "13.0"')
    assert cuda_of(sandbox, pod["id"]) == "13.1"
    on_13_0 = rest_create(api, "rest-ro", "EU-RO-1", minCudaVersion="13.0").json()
    assert on_13_0["cudaVersion"] == "13.0"  # the oldest host that qualifies
    assert rest_create(api, "too-new", "EU-RO-1", minCudaVersion="13.2").status_code == 400


def test_allowed_cuda_versions_is_an_exact_match_on_both_apis(
    api: httpx.Client, sdk: Any, sandbox: Sandbox
) -> None:
    refused = rest_create(api, "rest-exact", "EUR-IS-1", allowedCudaVersions=["13.0"])
    assert refused.status_code == 400
    assert "no longer any instances" in refused.json()["detail"]
    with pytest.raises(QueryError, match="no longer any instances"):
        sdk.create_pod(
            "sdk-exact", "img", RTX, data_center_id="EUR-IS-1", allowed_cuda_versions=["13.0"]
        )
    made = sdk.create_pod(
        "sdk-13-1", "img", RTX, data_center_id="EUR-IS-1", allowed_cuda_versions=["13.1"]
    )
    assert cuda_of(sandbox, made["id"]) == "13.1"
    both = rest_create(api, "both", "EU-RO-1", allowedCudaVersions=["13.0"], minCudaVersion="13.0")
    assert both.status_code == 400
    assert rest_create(api, "bad", "EU-RO-1", minCudaVersion="13").status_code == 422


def test_the_gpu_lists_carry_runpods_unplaceable_placeholder_type(
    api: httpx.Client, sdk: Any
) -> None:
    assert "unknown" in {g["id"] for g in sdk.get_gpus()}
    assert "unknown" in {g["id"] for g in api.get("/v2/catalog/gpus").json()["gpus"]}
    refused = api.post(
        "/v2/pods", json={"name": "x", "image": "img", "gpu": {"id": "unknown", "count": 1}}
    )
    assert refused.status_code == 400


def test_a_held_create_made_its_pod_and_answers_once_released(
    api: httpx.Client, sandbox: Sandbox
) -> None:
    admin = f"{sandbox.base_url}/_sandbox"
    httpx.post(f"{admin}/faults", json={"hold_creates": 2}).raise_for_status()
    answers: list[httpx.Response] = []

    def create(name: str) -> None:
        answers.append(rest_create(api, name, "EU-RO-1"))

    for name, fail in (("held-ok", False), ("held-500", True)):
        thread = threading.Thread(target=create, args=(name,))
        thread.start()
        deadline = time.monotonic() + 5
        held: list[dict[str, Any]] = []
        while not held and time.monotonic() < deadline:
            held = httpx.get(f"{admin}/held").json()["held"]
        assert [h["name"] for h in held] == [name]
        pods = httpx.get(f"{admin}/pods").json()["pods"]
        assert held[0]["pod_id"] in {p["id"] for p in pods if p["name"] == name}
        assert thread.is_alive()  # the answer is still held
        released = httpx.post(f"{admin}/held/release", json={"fail": fail}).json()
        assert released["released"] == [held[0]["pod_id"]]
        thread.join(5)
    assert [a.status_code for a in answers] == [201, 500]
    assert httpx.get(f"{admin}/held").json()["held"] == []


def test_failing_pod_listings_fail_only_pod_listings(
    api: httpx.Client, sdk: Any, sandbox: Sandbox
) -> None:
    sandbox.set_faults(list_pods_error_rate=1.0)
    assert api.get("/v2/pods").status_code == 500
    with pytest.raises(QueryError, match="Something went wrong"):
        sdk.get_pods()
    assert sdk.get_user()["id"]  # myself without its Pods still answers
    assert rest_create(api, "still-creates", "EU-RO-1").status_code == 201
