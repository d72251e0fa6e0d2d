"""Training runs end to end over HTTP against the sandbox (R1–R13, K1): SQLite with the
in-process broker (through the GraphQL adapter and through the REST v2 adapter), and PostgreSQL
with RabbitMQ and with Redis."""

from __future__ import annotations

import hashlib
import io
import json
import re
import time
import zipfile
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest

from application.run_settings import PUBLIC_BASE_IMAGE
from entrypoints.server import serve_with_sandbox
from entrypoints.settings import Settings
from runpod_sandbox import Sandbox
from tests.conftest import fresh_queue, require_service
from tests.e2e.conftest import (
    Api,
    Org,
    _drop,
    _pg_schema,
    connect,
    custom_spec,
    problem,
    volume_spec,
)
from tests.e2e.flows import upload_dataset

A100 = "NVIDIA A100 80GB PCIe"
STACKS = [
    "sqlite-memory",  # the default wire, REST v2
    "sqlite-memory-graphql",  # TENSORANT_RUNPOD_API=graphql: the SDK's wire drives every test
    pytest.param("postgres-rabbitmq", marks=[pytest.mark.postgres, pytest.mark.rabbitmq]),
    # Redis as the broker is proven where it differs (delivery, redelivery, dedupe) by
    # tests/integration/broker; a third run of every lifecycle here only doubled the rabbitmq one.
]
BROKERS = {"rabbitmq": "amqp://guest:guest@127.0.0.1:5672/%2F", "redis": "redis://127.0.0.1:6379/0"}
PORTS = {"rabbitmq": 5672, "redis": 6379}


@pytest.fixture(scope="module", params=STACKS)
def stack(
    request: pytest.FixtureRequest, sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Api]:
    kind = request.param
    data_dir: Path = tmp_path_factory.mktemp(kind)
    postgres = None
    broker = None
    queues = ExitStack()
    if kind.startswith("sqlite-memory"):
        settings = Settings(
            data_dir=data_dir, runpod_api="graphql" if kind.endswith("graphql") else "rest"
        )
    else:
        broker = kind.split("-")[1]
        require_service(broker, "127.0.0.1", PORTS[broker])
        url = request.getfixturevalue("postgres_url")
        postgres = (url, _pg_schema(url))
        settings = Settings(
            data_dir=data_dir,
            database_url=f"{url}?schema={postgres[1]}",
            broker_url=BROKERS[broker],
            queue_name=queues.enter_context(
                fresh_queue(BROKERS[broker] if broker == "rabbitmq" else None)
            ),
        )
    server, container = serve_with_sandbox(
        settings,
        sandbox,
        # With a broker URL: what `tensorant worker` and `tensorant projector` run, in-process.
        reactions=None if broker is None else {"worker": True, "relay": True},
        reconcile_interval=0.5,
        projection_poll_interval=0.2,
    )
    api = Api(kind, server.base_url, container, sandbox, settings, postgres)
    expected = "graphql" if kind.endswith("graphql") else "rest"  # REST v2 by default
    assert api.container.services.reactor.compute.wire.name == expected  # type: ignore[attr-defined]
    try:
        yield api
    finally:
        api.close()
        server.stop()
        if postgres is not None:
            _drop(*postgres)
        queues.close()


@pytest.fixture(autouse=True)
def _clean_sandbox(sandbox: Sandbox) -> Iterator[None]:
    sandbox.model.clear_faults()
    sandbox.set_scenario("success", 0)
    sandbox.model.price_overrides.clear()
    yield
    sandbox.model.clear_faults()
    sandbox.model.price_overrides.clear()


def ready(
    stack: Api, creds: dict[str, Any], storage: dict[str, Any] | None = None
) -> tuple[Org, dict[str, Any]]:
    """An organization with compute, storage, a project and a dataset version."""
    org = stack.new_org()
    connect(org, creds)
    r = org.owner.put("/v1/storage", json=storage or volume_spec(creds))
    assert r.status_code == 200, r.text
    project = org.member.post("/v1/projects", json={"name": "support-bot"}).json()
    dv = upload_dataset(org, project["id"], "chats")
    config = {
        "project_id": project["id"],
        "dataset_version_id": dv["id"],
        "kind": "trial",
        "base_model": "Qwen/Qwen2.5-7B-Instruct",
        "gpu_type_id": A100,
        "gpu_count": 1,
        "price_limit_per_hour": "2.00",
        "max_runtime_minutes": 60,
    }
    return org, config


def draft(org: Org, config: dict[str, Any], **changes: Any) -> dict[str, Any]:
    r = org.member.post("/v1/runs", json={**config, **changes})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    assert body["state"] == "draft" and body["pod_id"] is None
    return body


def launch(org: Org, run_id: str, price: str = "1.64") -> None:
    r = org.member.post(
        f"/v1/runs/{run_id}/launch", json={"confirm": True, "accepted_price_per_hour": price}
    )
    assert r.status_code == 202, r.text


def wait_state(org: Org, run_id: str, *states: str, timeout: float = 30) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        body = org.member.get(f"/v1/runs/{run_id}").json()
        if body["state"] in states:
            return body
        time.sleep(0.1)
    raise AssertionError(
        f"run stayed {body.get('state')} ({body.get('state_reason')}), wanted {states}"
    )


def sandbox_pods(sandbox: Sandbox, run_id: str) -> list[dict[str, Any]]:
    pods = httpx.get(f"{sandbox.base_url}/_sandbox/pods").json()
    items = pods["pods"] if isinstance(pods, dict) else pods
    return [p for p in items if p["name"] == f"tensorant-run-{run_id}"]


def offered(run: dict[str, Any]) -> set[str]:
    """The actions the run allows now, as GET /v1/runs shows them (`actions`)."""
    return {action for action, allowed in run["actions"].items() if allowed}


def cleanup_kinds(org: Org) -> list[tuple[str, str]]:
    """Cleanup items of the organization's runs; orphans are left out because every stack in the
    session shares one sandbox account, so another stack's Pods are orphans here (K1)."""
    items = org.member.get("/v1/cleanup").json()["items"]
    return [(i["kind"], i["run_id"]) for i in items if i["kind"] != "orphan"]


# ------------------------------------------------------------------------------ R1–R4


def test_r1_r3_drafts_are_saved_edited_and_deleted_without_renting_anything(
    stack: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(stack, creds)
    run = draft(org, config)
    assert offered(run) == {"edit", "delete", "launch", "cancel"}
    r = org.member.patch(f"/v1/runs/{run['id']}", json={**config, "max_runtime_minutes": 30})
    assert r.status_code == 200 and r.json()["max_runtime_minutes"] == 30
    assert org.member.delete(f"/v1/runs/{run['id']}").status_code == 204
    problem(org.member.get(f"/v1/runs/{run['id']}"), 404, "not-found")
    assert sandbox_pods(stack.sandbox, run["id"]) == []
    problem(org.auditor.post("/v1/runs", json=config), 403, "forbidden")


def test_r16_hyperparameters_are_bounded_defaulted_echoed_and_carried_to_the_trainer(
    stack: Api, creds: dict[str, Any]
) -> None:
    """R16: each hyperparameter out of bounds is a 422 naming it; those not given are the base
    model's architecture's defaults, named in `defaults`; PATCH replaces the choice; the
    launched run's manifest carries what was chosen to the trainer."""
    org, config = ready(stack, creds)
    for name, bad in (
        ("epochs", 0),
        ("learning_rate", 0.5),
        ("lora_rank", 1024),
        ("lora_alpha", 0),
        ("lora_dropout", 0.9),
        ("max_seq_len", 10),
        ("warmup_ratio", -0.1),
        ("validation_fraction", 0.6),
        ("seed", -1),
    ):
        body = problem(
            org.member.post("/v1/runs", json={**config, name: bad}), 422, "validation-error"
        )
        assert body["detail"].startswith(f"{name}:"), body
    # the memory model is asked at the chosen sequence length: 7B at 32768 tokens needs more
    # than an A100's 80 GB (at 2048, 22 GB)
    long = org.member.post("/v1/runs", json={**config, "max_seq_len": 32768})
    assert "GPU memory" in problem(long, 422, "gpu-memory-too-small")["detail"]
    run = draft(org, config, lora_rank=32, learning_rate=1e-4, validation_fraction=0.1)
    hp = run["hyperparameters"]
    assert (hp["lora_rank"], hp["learning_rate"], hp["validation_fraction"]) == (32, 1e-4, 0.1)
    # Qwen2.5-7B: a 7B model's defaults (trainer.protocol.default_hyperparameters)
    assert (hp["epochs"], hp["lora_alpha"], hp["max_seq_len"], hp["seed"]) == (1, 32, 2048, 0)
    assert (hp["lora_dropout"], hp["warmup_ratio"]) == (0.05, 0.03)
    assert sorted(run["defaults"]) == sorted(
        ["epochs", "lora_alpha", "lora_dropout", "max_seq_len", "warmup_ratio", "seed"]
    )
    r = org.member.patch(f"/v1/runs/{run['id']}", json={**config, "epochs": 3, "seed": 7})
    assert r.status_code == 200, r.text
    patched = r.json()
    assert (patched["hyperparameters"]["epochs"], patched["hyperparameters"]["seed"]) == (3, 7)
    assert patched["hyperparameters"]["lora_rank"] == 16  # no longer chosen: the default again
    assert "lora_rank" in patched["defaults"] and "epochs" not in patched["defaults"]
    assert (
        org.member.get(f"/v1/runs/{run['id']}").json()["hyperparameters"]
        == (patched["hyperparameters"])
    )
    chosen = draft(org, config, lora_rank=8, lora_alpha=24, warmup_ratio=0.2, seed=11)
    launch(org, chosen["id"])
    wait_state(org, chosen["id"], "succeeded")
    manifest = stack.sandbox.read_volume_file("nv7eu1ro4k", f"runs/{chosen['id']}/manifest.json")
    assert manifest is not None
    sent = json.loads(manifest)["hyperparameters"]
    assert (sent["lora_r"], sent["lora_alpha"], sent["warmup_ratio"], sent["seed"]) == (
        8,
        24,
        0.2,
        11,
    )
    assert (sent["learning_rate"], sent["epochs"], sent["validation_fraction"]) == (2e-4, 1, 0)


def test_r6_a_runs_history_is_paged_from_its_own_events(stack: Api, creds: dict[str, Any]) -> None:
    """The history is the run's stream in the log, read after `after`, at most `limit` lines."""
    org, config = ready(stack, creds)
    run = draft(org, config)
    for minutes in (30, 60):
        assert org.member.patch(
            f"/v1/runs/{run['id']}", json={**config, "max_runtime_minutes": minutes}
        ).is_success
    url = f"/v1/runs/{run['id']}/events"
    first = org.auditor.get(url, params={"limit": 2}).json()
    assert [(e["version"], e["type"]) for e in first["events"]] == [
        (1, "RunDrafted"),
        (2, "RunDraftUpdated"),
    ]
    assert first["next_after"] == 2
    assert first["events"][1]["data"]["config"]["max_runtime_minutes"] == 30
    assert first["events"][0]["actor"].startswith("user:")
    rest = org.auditor.get(url, params={"after": first["next_after"]}).json()
    assert [e["version"] for e in rest["events"]] == [3] and rest["next_after"] == 3
    assert org.auditor.get(url, params={"after": 3}).json() == {"events": [], "next_after": 3}
    assert org.member.delete(f"/v1/runs/{run['id']}").status_code == 204
    problem(org.auditor.get(url), 404, "not-found")


def test_r2_more_than_one_gpu_is_refused_with_its_reason_until_the_trainer_uses_them(
    stack: Api, creds: dict[str, Any]
) -> None:
    """The trainer trains on one GPU: a second would bill and sit idle, so a draft (and an
    edit) asking for two is refused, and nothing is drafted or rented."""
    org, config = ready(stack, creds)
    body = problem(
        org.member.post("/v1/runs", json={**config, "gpu_count": 2}), 422, "invalid-run-config"
    )
    assert body["rule"] == "gpu_count" and "uses one GPU" in body["detail"], body
    assert org.member.get("/v1/runs").json() == []
    run = draft(org, config)
    body = problem(
        org.member.patch(f"/v1/runs/{run['id']}", json={**config, "gpu_count": 2}),
        422,
        "invalid-run-config",
    )
    assert "billed and sit idle" in body["detail"]
    assert org.member.get(f"/v1/runs/{run['id']}").json()["gpu_count"] == 1
    assert sandbox_pods(stack.sandbox, run["id"]) == []


def test_r2_a_t4_is_refused_by_name_and_the_gpu_must_be_in_the_volume_datacenter(
    stack: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(stack, creds)
    body = problem(
        org.member.post("/v1/runs", json={**config, "gpu_type_id": "Tesla T4"}),
        422,
        "pre-ampere-gpu",
    )
    assert "Tesla T4" in body["detail"]
    problem(
        org.member.post("/v1/runs", json={**config, "gpu_type_id": "NVIDIA A40"}),
        422,
        "gpu-not-in-volume-datacenter",
    )
    problem(
        org.member.post(
            "/v1/runs", json={**config, "base_model": "meta-llama/Llama-3.3-70B-Instruct"}
        ),
        422,
        "gpu-memory-too-small",
    )


def test_r4_launch_needs_confirmation_and_rechecks_price_availability_and_balance(
    stack: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(stack, creds)
    run = draft(org, config)
    problem(org.member.post(f"/v1/runs/{run['id']}/launch", json={}), 422, "confirmation-required")
    httpx.post(f"{stack.sandbox.base_url}/_sandbox/prices", json={A100: "2.10"})
    problem(
        org.member.post(
            f"/v1/runs/{run['id']}/launch",
            json={"confirm": True, "accepted_price_per_hour": "1.64"},
        ),
        409,
        "price-above-limit",
    )
    httpx.post(f"{stack.sandbox.base_url}/_sandbox/prices", json={A100: "1.80"})
    problem(
        org.member.post(
            f"/v1/runs/{run['id']}/launch",
            json={"confirm": True, "accepted_price_per_hour": "1.64"},
        ),
        409,
        "price-changed",
    )
    httpx.post(f"{stack.sandbox.base_url}/_sandbox/prices", json={A100: None})
    stack.sandbox.model.set_faults(capacity_datacenters=["EU-RO-1"])
    # The catalog still lists stock; capacity is only known at create (docs/runpod.md, Known
    # behaviours).
    stack.sandbox.model.clear_faults()
    balance = stack.sandbox.model.balance
    stack.sandbox.model.set_balance("1.00")
    try:
        problem(
            org.member.post(
                f"/v1/runs/{run['id']}/launch",
                json={"confirm": True, "accepted_price_per_hour": "1.64"},
            ),
            409,
            "low-balance",
        )
    finally:
        stack.sandbox.model.set_balance(balance)
    assert org.member.get(f"/v1/runs/{run['id']}").json()["state"] == "draft"
    history = org.member.get(f"/v1/runs/{run['id']}/events").json()["events"]
    assert [e["data"]["reason"] for e in history if e["type"] == "LaunchRejected"] == [
        "price-above-limit",
        "price-changed",
        "low-balance",
    ]


def test_r4_a_gpu_gone_at_create_fails_the_run_with_reason_capacity(
    stack: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(stack, creds)
    run = draft(org, config)
    stack.sandbox.model.set_faults(capacity_gpu_types=[A100])
    launch(org, run["id"])
    body = wait_state(org, run["id"], "failed")
    assert body["state_reason"] == "capacity" and body["pod_id"] is None


# ------------------------------------------------------------------------------ R5–R7


def test_r5_r6_r7_a_trial_trains_verifies_its_adapter_and_releases_its_one_pod(
    stack: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(stack, creds)
    run = draft(org, config)
    launch(org, run["id"])
    done = wait_state(org, run["id"], "succeeded")
    assert done["adapter"]["verified_at"] and len(done["adapter"]["sha256"]) == 64
    assert done["cleanup"]["pod_status"] == "terminated"
    assert done["price_per_hour"] == "1.64" and done["datacenter_id"] == "EU-RO-1"
    pods = sandbox_pods(stack.sandbox, run["id"])
    assert len(pods) == 1 and pods[0]["status"] == "TERMINATED"  # R5: one launch = one Pod
    pod = next(p for p in stack.sandbox.model.all_pods() if p.id == pods[0]["id"])
    # R5: CUDA 13 or newer (a floor, not the exact-match set that shuts out 13.1 hosts)
    assert (pod.min_cuda_version, pod.allowed_cuda_versions) == ("13.0", [])
    assert pod.network_volume_id == "nv7eu1ro4k" and pod.image_name == PUBLIC_BASE_IMAGE
    assert pod.docker_args.startswith("bash -c ")  # T1: the start command brings the trainer
    logs = org.member.get(f"/v1/runs/{run['id']}/logs", params={"limit": 2}).json()
    assert len(logs["lines"]) == 2 and logs["next_after"] == logs["lines"][-1]["seq"]
    # The run has ended, so its Pod's token no longer works (a bad body is still a
    # 422 whoever sends it).
    trainer = stack.client(pod.env["TENSORANT_RUN_TOKEN"])
    batch = {"lines": [{"text": "late line"}], "batch": "3f2c1e9a-late"}
    late = trainer.post(f"/v1/trainer/runs/{run['id']}/logs", json=batch)
    problem(late, 401, "token-expired")
    every = org.member.get(f"/v1/runs/{run['id']}/logs", params={"limit": 1000}).json()["lines"]
    assert "late line" not in [line["text"] for line in every]
    bad = trainer.post(f"/v1/trainer/runs/{run['id']}/logs", json={**batch, "batch": "a b"})
    problem(bad, 422, "validation-error")
    with org.member.stream("GET", f"/v1/runs/{run['id']}/logs/stream") as s:
        text = "".join(s.iter_text())
    assert "event: log" in text and "event: end" in text
    types = [e["type"] for e in org.auditor.get(f"/v1/runs/{run['id']}/events").json()["events"]]
    assert (
        types.index("AdapterVerified")
        < types.index("PodTerminationRequested")
        < types.index("PodTerminated")
    )
    assert cleanup_kinds(org) == []
    card = org.member.get("/v1/connections").json()["compute"]
    assert card["write_permission"] == "proven"  # C3: a launch and a release succeeded


def test_r7_a_corrupt_adapter_is_refused_and_r13_release_needs_confirmation(
    stack: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(stack, creds)
    run = draft(org, config)
    stack.sandbox.set_scenario("corrupt_adapter", 1)
    launch(org, run["id"])
    body = wait_state(org, run["id"], "needs_recovery")
    assert body["state_reason"] == "adapter_not_zip" and body["cleanup"]["pod_status"] == "stopped"
    problem(
        org.member.post(f"/v1/runs/{run['id']}/pod/release", json={}), 409, "unverified-release"
    )
    r = org.member.post(
        f"/v1/runs/{run['id']}/pod/release", json={"confirm_delete_unverified": True}
    )
    assert r.status_code == 202
    body = wait_state(org, run["id"], "failed")
    assert body["state_reason"] == "released_unverified"
    assert sandbox_pods(stack.sandbox, run["id"])[0]["status"] == "TERMINATED"


# ------------------------------------------------------------------------------ R8–R11, K1


def test_r8_r9_export_failure_retains_the_pod_and_the_saved_adapter_recovers_it(
    stack: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(stack, creds)
    run = draft(org, config)
    stack.sandbox.set_scenario("export_fails", 1)
    launch(org, run["id"])
    body = wait_state(org, run["id"], "needs_recovery")
    assert body["state_reason"] == "export_failed" and body["stopped_storage_bills"]
    assert offered(body) == {"cancel", "resume", "release", "recover_verify", "recover_upload"}
    assert cleanup_kinds(org) == [("retained", run["id"])]
    assert sandbox_pods(stack.sandbox, run["id"])[0]["status"] == "EXITED"
    r = org.member.post(f"/v1/runs/{run['id']}/recovery/verify")
    assert r.status_code == 202, r.text
    assert offered(wait_state(org, run["id"], "succeeded")) == set()
    assert cleanup_kinds(org) == []


def test_r8_the_runtime_limit_stops_and_retains_the_pod(stack: Api, creds: dict[str, Any]) -> None:
    org, config = ready(stack, creds)
    run = draft(org, config, max_runtime_minutes=5)
    stack.sandbox.set_scenario("hang", 1)
    launch(org, run["id"])
    wait_state(org, run["id"], "running")
    stack.sandbox.advance_clock(6 * 60)
    body = wait_state(org, run["id"], "needs_recovery")
    assert body["state_reason"] == "runtime_limit" and body["runtime_seconds"] >= 300
    assert body["cleanup"]["pod_status"] == "stopped" and body["stopped_storage_bills"]
    history = org.auditor.get(f"/v1/runs/{run['id']}/events").json()["events"]
    stops = [e["data"]["reason"] for e in history if e["type"] == "PodStopped"]
    assert stops == ["runtime_limit"]
    assert not {"PodTerminationRequested", "PodTerminated"} & {e["type"] for e in history}
    stack.after_reconcile_passes()  # reconciled since: still there, stopped (never terminated)
    [pod] = sandbox_pods(stack.sandbox, run["id"])
    assert pod["status"] == "EXITED" and pod["terminated_at"] is None, pod
    assert cleanup_kinds(org) == [("retained", run["id"])]


def test_r10_r11_custom_s3_resume_fetch_and_upload_recovers_the_adapter(
    stack: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(stack, creds, storage=custom_spec(creds))
    run = draft(org, config)
    stack.sandbox.set_scenario("export_fails", 1)
    launch(org, run["id"])
    wait_state(org, run["id"], "needs_recovery")
    problem(org.member.post(f"/v1/runs/{run['id']}/recovery/verify"), 409, "recovery-not-possible")
    problem(
        org.member.post(f"/v1/runs/{run['id']}/pod/resume", json={}), 422, "confirmation-required"
    )
    r = org.member.post(f"/v1/runs/{run['id']}/pod/resume", json={"confirm_billing": True})
    assert r.status_code == 202, r.text
    shown = org.member.get(f"/v1/runs/{run['id']}").json()
    assert shown["ssh_command"] == f"ssh {shown['pod_id']}-" + shown["ssh_command"].split("-", 1)[1]
    assert shown["ssh_command"].endswith("@ssh.runpod.io") and "SCP" in shown["ssh_note"]
    data = httpx.get(
        f"{stack.sandbox.base_url}/_sandbox/pods/{shown['pod_id']}/files/workspace/data/adapter.zip"
    ).content
    assert zipfile.ZipFile(io.BytesIO(data)).namelist()
    r = org.member.post(
        f"/v1/runs/{run['id']}/recovery/upload",
        files={"file": ("adapter.zip", data, "application/zip")},
    )
    assert r.status_code == 202, r.text
    done = wait_state(org, run["id"], "succeeded")
    assert done["adapter"]["sha256"] == hashlib.sha256(data).hexdigest()


def test_r11_resume_without_capacity_is_refused_and_the_pod_stays_stopped(
    stack: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(stack, creds)
    run = draft(org, config)
    stack.sandbox.set_scenario("export_fails", 1)
    launch(org, run["id"])
    wait_state(org, run["id"], "needs_recovery")
    stack.sandbox.model.set_faults(resume_no_gpus=True)
    problem(
        org.member.post(f"/v1/runs/{run['id']}/pod/resume", json={"confirm_billing": True}),
        409,
        "gpu-unavailable",
    )
    assert org.member.get(f"/v1/runs/{run['id']}").json()["cleanup"]["pod_status"] == "stopped"
    assert sandbox_pods(stack.sandbox, run["id"])[0]["status"] == "EXITED"


# ------------------------------------------------------------------------------ R12


def test_r12_cancel_in_each_live_state(stack: Api, creds: dict[str, Any]) -> None:
    org, config = ready(stack, creds)
    drafted = draft(org, config)
    assert org.member.post(f"/v1/runs/{drafted['id']}/cancel").status_code == 202
    assert wait_state(org, drafted["id"], "cancelled")["pod_id"] is None

    running = draft(org, config)
    stack.sandbox.set_scenario("hang", 1)
    launch(org, running["id"])
    wait_state(org, running["id"], "running")
    assert org.member.post(f"/v1/runs/{running['id']}/cancel").status_code == 202
    body = wait_state(org, running["id"], "cancelled")
    assert (
        body["state_reason"] == "user_cancelled" and body["cleanup"]["pod_status"] == "terminated"
    )
    assert sandbox_pods(stack.sandbox, running["id"])[0]["status"] == "TERMINATED"

    retained = draft(org, config)
    stack.sandbox.set_scenario("export_fails", 1)
    launch(org, retained["id"])
    wait_state(org, retained["id"], "needs_recovery")
    assert org.member.post(f"/v1/runs/{retained['id']}/cancel").status_code == 202
    body = wait_state(org, retained["id"], "cancelled")
    assert body["cleanup"]["pod_status"] == "stopped"  # the only copy of the work is kept
    assert offered(body) == {"resume", "release"}
    assert [offered(r) for r in org.member.get("/v1/runs").json() if r["id"] == retained["id"]] == [
        {"resume", "release"}
    ]
    assert ("retained", retained["id"]) in cleanup_kinds(org)
    problem(org.member.post(f"/v1/runs/{retained['id']}/cancel"), 409, "illegal-transition")


def console_session(stack: Api, token: str) -> httpx.Client:
    """A browser's session: the sign-in form with its CSRF token, from this origin."""
    browser = httpx.Client(base_url=stack.base_url, timeout=30)
    signin = browser.get("/")
    csrf = re.search(r'name="csrf_token" value="([^"]+)"', signin.text)
    assert csrf is not None
    done = browser.post(
        "/signin",
        data={"csrf_token": csrf.group(1), "token": token},
        headers={"Origin": stack.base_url},
    )
    assert done.status_code == 303, done.text
    return browser


def test_r6_the_console_runs_page_is_each_sessions_own_and_follows_every_change(
    stack: Api, creds: dict[str, Any]
) -> None:
    """The page a session was shown last is shown again only while nothing it is made of
    changed: not to another session, and not after a run was drafted or deleted."""
    org, config = ready(stack, creds)
    member = console_session(stack, org.tokens["member"])
    auditor = console_session(stack, org.tokens["auditor"])
    try:
        first = member.get("/runs")
        assert first.status_code == 200 and "No runs yet." in first.text
        assert "Configure a run" in first.text  # a member may configure runs
        run = draft(org, config)
        listed = member.get("/runs").text
        assert run["id"] in listed and "No runs yet." not in listed
        assert member.get("/runs").text == listed  # unchanged: the same page
        seen = auditor.get("/runs").text
        assert run["id"] in seen and "Configure a run" not in seen  # its own caller's page
        assert "Configure a run" in member.get("/runs").text
        second = draft(org, config)
        both = member.get("/runs").text
        assert run["id"] in both and second["id"] in both
        assert org.member.delete(f"/v1/runs/{run['id']}").status_code == 204
        after = member.get("/runs").text
        assert run["id"] not in after and second["id"] in after
        # signed out: the session's kept page is not shown to its old cookie
        cookie = member.cookies.get("tensorant_session")
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', after)
        assert cookie and csrf is not None
        out = member.post(
            "/signout", data={"csrf_token": csrf.group(1)}, headers={"Origin": stack.base_url}
        )
        assert out.status_code == 303
        stale = httpx.get(
            f"{stack.base_url}/runs", cookies={"tensorant_session": cookie}, timeout=30
        )
        assert second["id"] not in stale.text
    finally:
        member.close()
        auditor.close()
