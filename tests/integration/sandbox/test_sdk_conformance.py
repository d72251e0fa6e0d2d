"""The runpod SDK's own public functions run unchanged against the sandbox (runpod-python 1.12)."""

from __future__ import annotations

import time
from typing import Any

import pytest
import requests
import runpod
from runpod.api.graphql import run_graphql_query
from runpod.error import AuthenticationError, QueryError

from runpod_sandbox import Sandbox

POD_FIELDS = {
    "id",
    "containerDiskInGb",
    "costPerHr",
    "desiredStatus",
    "dockerArgs",
    "dockerId",
    "env",
    "gpuCount",
    "imageName",
    "lastStatusChange",
    "machineId",
    "memoryInGb",
    "name",
    "podType",
    "port",
    "ports",
    "uptimeSeconds",
    "vcpuCount",
    "volumeInGb",
    "volumeMountPath",
    "runtime",
    "machine",
}
EU_VOLUME = "nv7eu1ro4k"


def _wait_runtime(sdk: Any, pod_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 3
    while time.monotonic() < deadline:
        pod = sdk.get_pod(pod_id)
        if pod["runtime"] is not None:
            return pod  # type: ignore[no-any-return]
        time.sleep(0.05)
    raise AssertionError("runtime never came up")


def test_get_user_returns_the_seeded_account_and_its_network_volumes(sdk: Any) -> None:
    user = sdk.get_user()
    assert set(user) == {"id", "pubKey", "networkVolumes"}
    assert user["id"].startswith("user_")
    volumes = {v["id"]: v for v in user["networkVolumes"]}
    assert volumes[EU_VOLUME] == {
        "id": EU_VOLUME,
        "name": "tensorant-eu-ro-1",
        "size": 100,
        "dataCenterId": "EU-RO-1",
    }
    assert {v["dataCenterId"] for v in volumes.values()} >= {"EU-RO-1", "US-KS-2", "CA-MTL-1"}


def test_get_gpus_lists_gpu_ids_spelled_as_runpod_spells_them(sdk: Any) -> None:
    gpus = {g["id"]: g for g in sdk.get_gpus()}
    assert gpus["NVIDIA A100 80GB PCIe"] == {
        "id": "NVIDIA A100 80GB PCIe",
        "displayName": "A100 PCIe",
        "memoryInGb": 80,
    }
    assert {
        "NVIDIA GeForce RTX 4090",
        "NVIDIA L40S",
        "NVIDIA H100 80GB HBM3",
        "Tesla T4",
        "Tesla V100-PCIE-16GB",
        "NVIDIA RTX A6000",
    } <= set(gpus)


def test_get_gpu_answers_every_field_the_sdk_asks_for(sdk: Any) -> None:
    gpu = sdk.get_gpu("NVIDIA GeForce RTX 4090", 2)
    assert gpu["securePrice"] == 0.60
    assert gpu["manufacturer"] == "Nvidia"
    assert set(gpu["lowestPrice"]) == {"minimumBidPrice", "uninterruptablePrice"}
    with pytest.raises(ValueError, match="No GPU found"):
        sdk.get_gpu("NVIDIA GeForce RTX 9999")


def test_create_pod_with_a_network_volume_lands_in_the_volume_datacenter(
    sdk: Any, sandbox: Sandbox
) -> None:
    created = sdk.create_pod(
        "conf-1",
        "runpod/pytorch:2.4",
        "NVIDIA A100 80GB PCIe",
        network_volume_id=EU_VOLUME,
        env={"A": "1", "B": "two"},
        allowed_cuda_versions=["12.4", "13.0"],
        ports="8888/http, 22/tcp",
    )
    assert set(created) == {"id", "imageName", "env", "machineId", "machine"}
    assert created["env"] == ["A=1", "B=two"]
    assert created["machine"]["podHostId"].startswith(created["id"] + "-")
    assert len(created["machine"]["podHostId"]) == len(created["id"]) + 9
    record = next(p for p in sandbox.model.all_pods() if p.id == created["id"])
    assert record.datacenter_id == "EU-RO-1"
    assert record.allowed_cuda_versions == ["12.4", "13.0"]


def test_a_new_pod_has_no_runtime_until_its_container_is_up(sdk: Any) -> None:
    pod_id = sdk.create_pod("conf-2", "img", "NVIDIA GeForce RTX 4090", ports="8888/http,22/tcp")[
        "id"
    ]
    starting = sdk.get_pod(pod_id)
    assert set(starting) == POD_FIELDS
    assert starting["desiredStatus"] == "RUNNING"
    assert starting["runtime"] is None
    assert starting["costPerHr"] == 0.60
    up = _wait_runtime(sdk, pod_id)
    ssh = next(p for p in up["runtime"]["ports"] if p["privatePort"] == 22)
    assert ssh["isIpPublic"] is True
    assert up["machine"] == {"gpuDisplayName": "RTX 4090"}


def test_get_pods_lists_the_account_pods_with_the_sdk_fields(sdk: Any) -> None:
    pod_id = sdk.create_pod("conf-3", "img", "NVIDIA RTX A6000", gpu_count=2)["id"]
    pods = sdk.get_pods()
    assert [p["id"] for p in pods] == [pod_id]
    assert set(pods[0]) == POD_FIELDS
    assert pods[0]["costPerHr"] == pytest.approx(0.98)
    assert pods[0]["gpuCount"] == 2


def test_stop_resume_and_terminate_follow_runpod_statuses(sdk: Any) -> None:
    pod_id = sdk.create_pod("conf-4", "img", "NVIDIA L40S", network_volume_id=EU_VOLUME)["id"]
    assert sdk.stop_pod(pod_id) == {"id": pod_id, "desiredStatus": "EXITED"}
    assert sdk.get_pod(pod_id)["runtime"] is None
    resumed = sdk.resume_pod(pod_id, 1)
    assert resumed["desiredStatus"] == "RUNNING"
    assert resumed["machine"]["podHostId"].startswith(pod_id)
    assert sdk.terminate_pod(pod_id) is None
    assert sdk.get_pod(pod_id) is None
    assert sdk.get_pods() == []


def test_cpu_pods_go_through_deploy_cpu_pod(sdk: Any) -> None:
    created = sdk.create_pod("cpu-1", "ubuntu:22.04")
    assert sdk.get_pod(created["id"])["machine"] == {"gpuDisplayName": "CPU"}


def test_update_user_settings_and_create_template_work(sdk: Any) -> None:
    new_key = "ssh-ed25519 AAAA new\nkey"
    assert sdk.update_user_settings(new_key)["pubKey"] == new_key
    template = sdk.create_template(
        "tpl", "img", docker_start_cmd='bash -c "echo hi"', env={"K": "V"}
    )
    assert template["env"] == [{"key": "K", "value": "V"}]


def test_an_unknown_key_is_an_authentication_error(sdk: Any) -> None:
    with pytest.raises(AuthenticationError):
        sdk.get_user(api_key="rpa_" + "X" * 40)


def test_the_read_only_key_reads_but_cannot_create(
    sdk: Any, sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runpod, "api_key", sandbox.credentials()["read_only_api_key"])
    assert sdk.get_user()["id"].startswith("user_")
    with pytest.raises(QueryError, match=r"^Unauthorized$"):
        sdk.create_pod("ro", "img", "NVIDIA GeForce RTX 4090")
    assert sandbox.model.all_pods() == []


def test_docs_style_api_key_query_parameter_is_accepted(sandbox: Sandbox) -> None:
    key = sandbox.credentials()["api_key"]
    answer = requests.post(
        f"{sandbox.base_url}/graphql?api_key={key}",
        json={"query": "{ myself { id clientBalance spendLimit } }"},
        timeout=5,
    )
    assert answer.json()["data"]["myself"]["clientBalance"] == 250.0


def test_a_syntax_error_is_http_400_with_errors(sandbox: Sandbox) -> None:
    answer = requests.post(
        f"{sandbox.base_url}/graphql",
        headers={"Authorization": f"Bearer {sandbox.credentials()['api_key']}"},
        json={"query": "query { myself { id "},
        timeout=5,
    )
    assert answer.status_code == 400
    assert answer.json()["errors"][0]["message"]


def test_our_adapter_fields_and_datacenters_are_queryable(sdk: Any) -> None:
    pod_id = sdk.create_pod(
        "conf-5", "img", "NVIDIA GeForce RTX 4090", network_volume_id="nv2usks8m3"
    )["id"]
    data = run_graphql_query(
        'query { pod(input: {podId: "' + pod_id + '"}) { networkVolumeId dataCenterId gpuTypeId '
        "machine { dataCenterId location podHostId gpuDisplayName } } "
        "dataCenters { id name location s3Api "
        "gpuAvailability { gpuTypeId displayName stockStatus } } "
        'gpuTypes(input: {id: "NVIDIA L40S"}) { id lowestPrice(input: {gpuCount: 1, '
        "secureCloud: true}) { stockStatus availableGpuCounts uninterruptablePrice } } }"
    )["data"]
    assert data["pod"]["networkVolumeId"] == "nv2usks8m3"
    assert data["pod"]["dataCenterId"] == "US-KS-2"
    assert data["pod"]["gpuTypeId"] == "NVIDIA GeForce RTX 4090"
    assert data["pod"]["machine"]["location"] == "United States"
    dcs = {d["id"]: d for d in data["dataCenters"]}
    assert dcs["CA-MTL-1"]["s3Api"] is False
    assert dcs["EU-RO-1"]["s3Api"] is True
    eu = {g["gpuTypeId"] for g in dcs["EU-RO-1"]["gpuAvailability"]}
    assert {
        "NVIDIA A100 80GB PCIe",
        "NVIDIA GeForce RTX 4090",
        "NVIDIA RTX A6000",
        "NVIDIA L40S",
        "Tesla T4",
    } <= eu
    assert data["gpuTypes"][0]["lowestPrice"]["stockStatus"] == "Medium"
