"""The sandbox's REST v2 behaves as RunPod's REST v2 spec describes, over the GraphQL model."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from runpod_sandbox import Sandbox

RTX = "NVIDIA GeForce RTX 4090"
BODY: dict[str, Any] = {
    "name": "tensorant-run-v2",
    "image": "tensorant/trainer:v2",
    "gpu": {"id": RTX, "count": 1, "allowedCudaVersions": ["13.0"]},
    "dataCenterIds": ["EU-RO-1"],
    "env": {"TENSORANT_RUN_ID": "r1"},
    "mounts": {"network": [{"volumeId": "nv7eu1ro4k", "path": "/workspace"}]},
}


@pytest.fixture
def api(sandbox: Sandbox) -> Iterator[httpx.Client]:
    key = sandbox.credentials()["api_key"]
    with httpx.Client(
        base_url=sandbox.base_url, headers={"Authorization": f"Bearer {key}"}, timeout=5
    ) as client:
        yield client


def create(api: httpx.Client, **changes: Any) -> dict[str, Any]:
    answer = api.post("/v2/pods", json={**BODY, **changes})
    assert answer.status_code == 201, answer.text
    return dict(answer.json())


def test_a_created_pod_has_the_v2_shape_and_is_listed_and_read(api: httpx.Client) -> None:
    pod = create(api)
    assert pod["status"] in ("PROVISIONING", "STARTING")
    assert pod["gpu"]["id"] == RTX
    assert pod["gpu"]["count"] == 1
    assert pod["mounts"] == BODY["mounts"]
    assert (pod["dataCenterId"], pod["cost"], pod["env"]) == ("EU-RO-1", 0.6, BODY["env"])
    assert pod["ssh"]["proxy"]["username"].startswith(pod["id"])
    assert {"createdAt", "startedAt", "actions", "runtime"} <= set(pod)
    assert "costPerHr" not in pod
    assert pod["id"] in [p["id"] for p in api.get("/v2/pods").json()["pods"]]
    assert api.get(f"/v2/pods/{pod['id']}").json()["name"] == "tensorant-run-v2"


def test_a_pod_made_through_graphql_is_visible_through_rest_and_the_other_way(
    api: httpx.Client, sdk: Any
) -> None:
    made = sdk.create_pod("via-graphql", "img", RTX, cloud_type="SECURE", data_center_id="EU-RO-1")
    assert api.get(f"/v2/pods/{made['id']}").json()["name"] == "via-graphql"
    rest = create(api, name="via-rest")
    assert sdk.get_pod(rest["id"])["name"] == "via-rest"


def test_actions_follow_the_allowed_table_and_refuse_others_with_409(
    api: httpx.Client, sandbox: Sandbox
) -> None:
    pod = create(api)
    act = f"/v2/pods/{pod['id']}/action"
    assert api.post(act, json={"action": "start"}).status_code == 409
    stopped = api.post(act, json={"action": "stop"})
    assert (stopped.status_code, stopped.json()["status"], stopped.json()["cost"]) == (
        200,
        "EXITED",
        0.0,
    )
    assert stopped.json()["actions"] == ["start", "terminate"]
    conflict = api.post(act, json={"action": "stop"})
    assert conflict.status_code == 409
    assert conflict.headers["content-type"] == "application/problem+json"
    assert set(conflict.json()) == {"title", "status", "detail"}
    assert api.post(act, json={"action": "start"}).json()["status"] in ("PROVISIONING", "STARTING")
    assert api.post(act, json={"action": "explode"}).status_code == 422
    assert api.post(act, json={"action": "terminate"}).status_code == 204
    assert api.get(f"/v2/pods/{pod['id']}").status_code == 404
    assert sandbox.model.pods[pod["id"]].desired_status == "TERMINATED"


def test_patch_changes_mutable_fields_and_delete_terminates(api: httpx.Client) -> None:
    pod = create(api)
    patched = api.patch(f"/v2/pods/{pod['id']}", json={"name": "renamed", "env": {"A": "1"}})
    assert (patched.json()["name"], patched.json()["env"]) == ("renamed", {"A": "1"})
    moved = {"network": [{"volumeId": "nv2usks8m3", "path": "/x"}]}
    assert api.patch(f"/v2/pods/{pod['id']}", json={"mounts": moved}).status_code == 400
    assert api.delete(f"/v2/pods/{pod['id']}").status_code == 204
    assert api.delete(f"/v2/pods/{pod['id']}").status_code == 404


def test_refusals_are_problems_capacity_400_balance_402_validation_422_auth_401_403(
    api: httpx.Client, sandbox: Sandbox
) -> None:
    sandbox.set_faults(capacity_gpu_types=[RTX])
    capacity = api.post("/v2/pods", json=BODY)
    assert capacity.status_code == 400
    assert "no longer any instances available" in capacity.json()["detail"]
    sandbox.set_faults({})
    sandbox.model.set_balance("0.10")
    assert api.post("/v2/pods", json=BODY).status_code == 402
    bogus = api.post("/v2/pods", json={**BODY, "bogus": 1})
    assert bogus.status_code == 422
    assert "additional properties 'bogus'" in bogus.json()["errors"][0]
    both = {**BODY, "mounts": {**BODY["mounts"], "persistent": {"size": 20, "path": "/w"}}}
    assert api.post("/v2/pods", json=both).status_code == 400
    anonymous = httpx.get(f"{sandbox.base_url}/v2/pods")
    assert anonymous.status_code == 401
    assert "RateLimit" not in anonymous.headers
    ro = sandbox.credentials()["read_only_api_key"]
    assert (
        httpx.post(
            f"{sandbox.base_url}/v2/pods", json=BODY, headers={"Authorization": f"Bearer {ro}"}
        ).status_code
        == 403
    )


def test_network_volumes_are_created_listed_grown_never_shrunk_and_deleted(
    api: httpx.Client,
) -> None:
    made = api.post(
        "/v2/network-volumes", json={"name": "extra", "size": 20, "dataCenter": "US-KS-2"}
    )
    assert made.status_code == 201
    vol = made.json()
    assert (vol["size"], vol["dataCenter"], vol["type"]) == (20, "US-KS-2", "STANDARD")
    assert vol["id"] in [v["id"] for v in api.get("/v2/network-volumes").json()["networkVolumes"]]
    assert api.patch(f"/v2/network-volumes/{vol['id']}", json={"size": 30}).json()["size"] == 30
    assert api.patch(f"/v2/network-volumes/{vol['id']}", json={"size": 25}).status_code == 400
    assert api.patch(f"/v2/network-volumes/{vol['id']}", json={}).status_code == 422
    assert (
        api.post(
            "/v2/network-volumes", json={"name": "x", "size": 5, "dataCenter": "US-KS-2"}
        ).status_code
        == 422
    )
    assert api.delete(f"/v2/network-volumes/{vol['id']}").status_code == 204
    assert api.get(f"/v2/network-volumes/{vol['id']}").status_code == 404


def test_the_gpu_catalog_gives_prices_and_per_datacenter_availability(api: httpx.Client) -> None:
    gpus = {
        g["id"]: g
        for g in api.get(
            "/v2/catalog/gpus", params={"include": "AVAILABILITY", "product": "POD", "count": 1}
        ).json()["gpus"]
    }
    assert gpus[RTX]["price"]["secure"] == 0.6
    assert {d["id"]: d["availability"] for d in gpus[RTX]["dataCenters"]}["EU-RO-1"] == "HIGH"
    assert api.get("/v2/catalog/gpus", params={"include": "AVAILABILITY"}).status_code == 400


def test_every_authenticated_answer_carries_the_quota_and_a_low_quota_gives_429(
    api: httpx.Client, sandbox: Sandbox
) -> None:
    sandbox.set_faults(rate_limit_per_minute=3)
    seen = [api.get("/v2/network-volumes") for _ in range(3)]
    assert [a.status_code for a in seen] == [200, 200, 200]
    assert all('"minute";q=3;w=60' in a.headers["RateLimit-Policy"] for a in seen)
    assert '"minute";r=0;' in seen[-1].headers["RateLimit"]
    refused = api.get("/v2/pods")
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    assert refused.json()["detail"] == "rate limit exceeded for the minute window"
    sandbox.advance_clock(int(refused.headers["Retry-After"]))
    assert api.get("/v2/pods").status_code == 200
    assert sandbox.model.rate_limiter.log.counts() == {200: 4, 429: 1}


def test_pod_logs_stream_as_server_sent_events(api: httpx.Client, sandbox: Sandbox) -> None:
    pod = create(api)
    sandbox.model.append_log(pod["id"], "container", "step 1/3 loss=2.0")
    events = []
    with api.stream("GET", f"/v2/pods/{pod['id']}/logs", params={"tail": 10}) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        for line in answer.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
            if any(e["source"] == "container" for e in events):
                break
    assert events[0]["source"] == "system"
    assert events[-1]["line"] == "step 1/3 loss=2.0"
    api.post(f"/v2/pods/{pod['id']}/action", json={"action": "stop"})
    # A stopped Pod writes no more, so the stream ends after its backfill.
    after = api.get(
        f"/v2/pods/{pod['id']}/logs",
        params={"source": "container"},
        headers={"Last-Event-ID": "2026-01-01T00:00:00Z/000000000000"},
    )
    lines = [json.loads(x[6:]) for x in after.text.splitlines() if x.startswith("data: ")]
    assert [e["line"] for e in lines] == ["step 1/3 loss=2.0"]
