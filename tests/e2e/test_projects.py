"""Projects, dataset versions (P1) and the GPU catalog over HTTP."""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

import pytest

from domain.memory import catalogue_shape, memory_need
from tests.builders import CHATS
from tests.e2e.conftest import Api, Org, connect, problem, ready_org
from tests.e2e.flows import upload_dataset

DATASET = {"name": "tickets", "version": "v1", "object_key": "datasets/tickets/v1.jsonl"}


@pytest.fixture
def ready(api: Api, creds: dict[str, Any]) -> Org:
    return ready_org(api, creds)


def test_a_project_needs_storage_first_P1(org: Org) -> None:
    problem(org.owner.post("/v1/projects", json={"name": "x"}), 409, "storage-not-connected")


def test_creating_a_project_registers_it_and_locks_storage_P1(ready: Org) -> None:
    r = ready.member.post("/v1/projects", json={"name": "support-bot"})
    assert r.status_code == 201, r.text
    project = r.json()
    assert project["name"] == "support-bot"
    assert project["created_at"].endswith("Z")
    assert set(project) >= {"id", "name", "created_at"}
    assert ready.auditor.get("/v1/projects").json() == [project]
    assert ready.owner.get("/v1/connections").json()["storage"]["locked"] is True


def test_projects_need_a_name(ready: Org) -> None:
    problem(ready.owner.post("/v1/projects", json={"name": ""}), 422, "validation-error")
    problem(ready.owner.post("/v1/projects", json={"name": "   "}), 422, "invalid-project")


def test_dataset_versions_are_registered_and_listed_P1(ready: Org) -> None:
    pid = ready.owner.post("/v1/projects", json={"name": "p"}).json()["id"]
    assert ready.finance.get(f"/v1/projects/{pid}/datasets").json() == []
    uploaded = upload_dataset(ready, pid, "tickets", "v0")
    assert uploaded["row_count"] == 3 and uploaded["size_bytes"] == len(CHATS)
    assert uploaded["sha256"] == hashlib.sha256(CHATS).hexdigest()
    assert uploaded["format"] == "chat"
    body = {**DATASET, "object_key": uploaded["object_key"], "sha256": uploaded["sha256"]}
    r = ready.member.post(f"/v1/projects/{pid}/datasets", json=body)
    assert r.status_code == 201, r.text
    dv = r.json()
    assert dv["id"] and {k: dv[k] for k in body} == body
    assert ready.finance.get(f"/v1/projects/{pid}/datasets").json() == [uploaded, dv]
    problem(
        ready.member.post(f"/v1/projects/{pid}/datasets", json=body), 409, "dataset-version-exists"
    )
    problem(
        ready.member.post(
            f"/v1/projects/{pid}/datasets",
            json={**DATASET, "version": "v2", "object_key": "/etc/passwd"},
        ),
        422,
        "invalid-dataset",
    )
    problem(
        ready.member.post(f"/v1/projects/{pid}/datasets", json={**DATASET, "sha256": "xyz"}),
        422,
        "validation-error",
    )


def test_another_organizations_project_is_not_found_A4(
    api: Api, ready: Org, creds: dict[str, Any]
) -> None:
    pid = ready.owner.post("/v1/projects", json={"name": "mine"}).json()["id"]
    other = ready_org(api, creds)
    for target in (pid, str(uuid.uuid4()), "not-a-uuid"):
        problem(other.owner.get(f"/v1/projects/{target}/datasets"), 404, "not-found")
        problem(
            other.member.post(f"/v1/projects/{target}/datasets", json=DATASET), 404, "not-found"
        )
    assert other.owner.get("/v1/projects").json() == []


@pytest.mark.parametrize("role", ["auditor", "finance"])
def test_readers_cannot_create_projects_or_datasets_A2(ready: Org, role: str) -> None:
    pid = ready.owner.post("/v1/projects", json={"name": "p"}).json()["id"]
    problem(ready.clients[role].post("/v1/projects", json={"name": "x"}), 403, "forbidden")
    problem(
        ready.clients[role].post(f"/v1/projects/{pid}/datasets", json=DATASET), 403, "forbidden"
    )


def test_gpus_carry_price_stock_and_eligibility_R2(org: Org, creds: dict[str, Any]) -> None:
    problem(org.member.get("/v1/gpus"), 409, "not-connected")
    connect(org, creds)
    gpus = {g["id"]: g for g in org.auditor.get("/v1/gpus").json()}
    a100 = gpus["NVIDIA A100 80GB PCIe"]
    assert a100["eligible"] is True
    assert a100["ineligible_reason"] is None
    assert a100["architecture"] == "ampere"
    assert a100["memory_gb"] == 80
    assert a100["price_per_hour"] == "1.64"
    assert "EU-RO-1" in a100["datacenters"]
    t4 = gpus["Tesla T4"]
    assert t4["eligible"] is False
    assert "pre-Ampere" in t4["ineligible_reason"]
    a4000 = gpus["NVIDIA RTX A4000"]  # 16 GB Ampere: eligible until a base model is named
    assert (a4000["architecture"], a4000["eligible"]) == ("ampere", True)
    in_is = org.member.get("/v1/gpus", params={"datacenter_id": "EUR-IS-1"}).json()
    assert in_is
    assert all("EUR-IS-1" in g["datacenters"] for g in in_is)
    assert "NVIDIA A100 80GB PCIe" not in {g["id"] for g in in_is}


def test_gpus_for_a_base_model_judge_memory_with_the_memory_models_figure_R2(
    ready: Org,
) -> None:
    """The defaults train a 7B model on a 24 GB Ampere card; a 16 GB one is refused with the
    memory model's figure, in the list and at draft."""
    org = ready
    r = org.member.get("/v1/gpus", params={"base_model": "Qwen/Qwen2.5-7B-Instruct"})
    assert r.status_code == 200, r.text
    gpus = {g["id"]: g for g in r.json()}
    a5000 = gpus["NVIDIA RTX A5000"]
    assert (a5000["memory_gb"], a5000["architecture"]) == (24, "ampere")
    assert a5000["eligible"] is True and a5000["ineligible_reason"] is None
    a4000 = gpus["NVIDIA RTX A4000"]
    assert (a4000["memory_gb"], a4000["eligible"]) == (16, False)
    reason = a4000["ineligible_reason"]
    need = memory_need(catalogue_shape("Qwen/Qwen2.5-7B-Instruct"))  # type: ignore[arg-type]
    assert 16 < need.total_gib <= 24
    figure = f"needs {need.total_gib:.1f} GB at 2,048 tokens"
    assert reason.startswith(f"Qwen/Qwen2.5-7B-Instruct {figure}"), reason
    assert "weights 14.2" in reason and "logits" in reason and "the GPU has 16 GB" in reason
    assert "pre-Ampere" in gpus["Tesla T4"]["ineligible_reason"]  # the architecture comes first
    assert gpus["NVIDIA A100 80GB PCIe"]["eligible"] is True
    listed = [g["id"] for g in r.json()]
    assert listed.index("NVIDIA RTX A5000") < listed.index("NVIDIA RTX A4000")  # eligible first
    llama = org.member.get("/v1/gpus", params={"base_model": "meta-llama/Llama-3.1-8B-Instruct"})
    assert {g["id"]: g["eligible"] for g in llama.json()}["NVIDIA GeForce RTX 4090"] is True
    huge = org.member.get("/v1/gpus", params={"base_model": "meta-llama/Llama-3.3-70B-Instruct"})
    assert not [g["id"] for g in huge.json() if g["eligible"]]  # no single card holds 70B
    problem(
        org.member.get("/v1/gpus", params={"base_model": "acme/none"}), 422, "unknown-base-model"
    )
    # The draft applies the same rule, with the same figure.
    pid = org.member.post("/v1/projects", json={"name": "memory"}).json()["id"]
    body = problem(
        org.member.post(
            "/v1/runs",
            json={
                "project_id": pid,
                "dataset_version_id": upload_dataset(org, pid, "m")["id"],
                "kind": "trial",
                "base_model": "Qwen/Qwen2.5-7B-Instruct",
                "gpu_type_id": "NVIDIA RTX A4000",
                "gpu_count": 1,
                "price_limit_per_hour": "2.00",
                "max_runtime_minutes": 60,
            },
        ),
        422,
        "gpu-memory-too-small",
    )
    assert figure in body["detail"], body


def test_concurrent_first_projects_never_fail_with_a_server_error(ready: Org) -> None:
    """Two first projects race to lock the storage: one wins, the other is a 409 to retry."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(8) as pool:
        statuses = list(
            pool.map(lambda i: ready.owner.post("/v1/projects", json={"name": f"p{i}"}), range(8))
        )
    assert {r.status_code for r in statuses} <= {201, 409}, [r.text for r in statuses]
    assert any(r.status_code == 201 for r in statuses)
    for r in statuses:
        if r.status_code == 409:
            problem(r, 409, "concurrent-change")


def test_control_characters_in_bodies_paths_and_queries_are_refused_not_500(
    api: Api, creds: dict[str, Any]
) -> None:
    """PostgreSQL cannot store NUL: such input is a 422 problem, never an internal error."""
    org = ready_org(api, creds)
    problem(org.owner.post("/v1/projects", json={"name": "bad\u0000name"}), 422, "validation-error")
    problem(org.owner.get("/v1/projects/x%00y/datasets"), 422, "validation-error")
    problem(
        org.auditor.get("/v1/audit/events", params={"type": "a\u0000"}), 422, "validation-error"
    )
    assert org.owner.get("/v1/projects").status_code == 200
