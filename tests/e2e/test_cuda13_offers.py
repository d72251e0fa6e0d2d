"""R2/R5, acceptance 4: offers that can be placed. GPU listings ask RunPod for hosts of CUDA 13
or newer; a GPU type RunPod has in the volume's datacenter only on older drivers (the sandbox's
H200 in EU-RO-1) is listed ineligible with `no-cuda13-hosts`, and a draft on it is refused with
that problem, over HTTP against a served stack on the default wire (REST v2)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.e2e.conftest import Api, problem, volume_spec
from tests.e2e.test_runs import draft, ready

H200 = "NVIDIA H200"


def test_a_gpu_without_cuda13_hosts_in_the_volumes_datacenter_is_ineligible_and_refused(
    api: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(api, creds)  # a network volume in EU-RO-1
    gpus = {g["id"]: g for g in org.member.get("/v1/gpus").json()}
    h200 = gpus[H200]
    assert (h200["eligible"], h200["ineligible_code"]) == (False, "no-cuda13-hosts"), h200
    assert "EU-RO-1" in h200["ineligible_reason"] and "CUDA 13" in h200["ineligible_reason"]
    assert "EU-RO-1" not in h200["datacenters"]  # its EU-RO-1 stock is on older drivers only
    a100 = gpus["NVIDIA A100 80GB PCIe"]
    assert (a100["eligible"], a100["ineligible_code"]) == (True, None)
    assert gpus["Tesla T4"]["ineligible_code"] == "pre-ampere-gpu"
    # Listed for the volume's datacenter, it is shown there as ineligible, not hidden.
    in_ro = {g["id"]: g for g in org.member.get("/v1/gpus?datacenter_id=EU-RO-1").json()}
    assert in_ro[H200]["ineligible_code"] == "no-cuda13-hosts"
    # In US-KS-2 its hosts run CUDA 13: eligible there.
    in_ks = {g["id"]: g for g in org.member.get("/v1/gpus?datacenter_id=US-KS-2").json()}
    assert (in_ks[H200]["eligible"], in_ks[H200]["datacenters"]) == (True, ["US-KS-2"])

    refused = org.member.post("/v1/runs", json={**config, "gpu_type_id": H200})
    body = problem(refused, 422, "no-cuda13-hosts")
    assert "EU-RO-1" in body["detail"]
    assert draft(org, config)["gpu_type_id"] == "NVIDIA A100 80GB PCIe"  # others still draft


def test_a_launch_is_refused_when_the_drafted_gpus_cuda13_hosts_are_gone(
    api: Api, creds: dict[str, Any]
) -> None:
    """The launch's re-check asks RunPod again: a GPU drafted while it had CUDA 13 hosts in
    the volume's datacenter, and since left only on older drivers there, is not rented."""
    org, config = ready(api, creds, volume_spec(creds, "nv2usks8m3", "US-KS-2"))
    run = draft(org, config, gpu_type_id=H200, price_limit_per_hour="5.00")
    admin = httpx.Client(base_url=f"{api.sandbox.base_url}/_sandbox", timeout=10)
    move = {"gpu_type_id": H200, "datacenter_id": "US-KS-2"}
    try:
        admin.post("/cuda", json={**move, "versions": ["12.8"]}).raise_for_status()
        refused = org.member.post(
            f"/v1/runs/{run['id']}/launch",
            json={"confirm": True, "accepted_price_per_hour": "3.59"},
        )
        body = problem(refused, 409, "availability-changed")
        assert "CUDA 13" in body["detail"] and "US-KS-2" in body["detail"]
        gpus = {g["id"]: g for g in org.member.get("/v1/gpus").json()}
        assert gpus[H200]["ineligible_code"] == "no-cuda13-hosts"
    finally:
        admin.post("/cuda", json={**move, "versions": None}).raise_for_status()
        admin.close()
    assert org.member.get(f"/v1/runs/{run['id']}").json()["state"] == "draft"
    assert not [p for p in api.sandbox.model.all_pods() if p.name.endswith(run["id"])]
