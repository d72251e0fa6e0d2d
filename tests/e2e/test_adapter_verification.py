"""R7 over HTTP: bad adapters never verify. The sandbox's Pod trains
and then hangs; the test acts as its trainer: it writes an adapter.zip to the network volume
through the volume's S3 API and reports `exported` through the trainer callback with the Pod's
own run token, as the container would. Each bad adapter sends the run to `needs_recovery` with
its own reason code; the Pod is stopped, retained and listed in /v1/cleanup."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Api, Org, problem
from tests.e2e.flows import (
    RunPodConsole,
    draft,
    launch,
    private_stack,
    ready,
    until,
    volume_objects,
    wait_state,
)
from tests.lora_builders import BAD_ADAPTERS, QWEN_7B, lora_zip


@pytest.fixture(scope="module")
def world(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Api, RunPodConsole, Org, dict[str, Any], dict[str, Any]]]:
    with private_stack(tmp_path_factory, "adapters") as (api, console):
        creds = api.sandbox.credentials()
        org, config = ready(api, creds)
        yield api, console, org, config, creds


def _act_as_trainer(
    api: Api, console: RunPodConsole, org: Org, config: dict[str, Any], creds: dict[str, Any]
) -> tuple[str, dict[str, str]]:
    """A launched run whose Pod trains and then hangs; (run id, the Pod's env)."""
    console.scenario("hang", 1)
    run_id = draft(org, config)["id"]
    launch(org, run_id)
    wait_state(org, run_id, "running")
    pods = until(lambda: console.pods_of_run(run_id), what="the run's Pod")
    return run_id, pods[0]["env"]


def _report_exported(api: Api, run_id: str, env: dict[str, str], data: bytes) -> None:
    key = f"runs/{run_id}/adapter.zip"
    creds = api.sandbox.credentials()
    volume_objects(creds).put_object(Bucket="nv7eu1ro4k", Key=key, Body=data)
    r = httpx.post(
        f"{api.base_url}/v1/trainer/runs/{run_id}/exported",
        json={
            "object_key": key,
            "sha256": hashlib.sha256(data).hexdigest(),
            "size_bytes": len(data),
        },
        headers={"Authorization": f"Bearer {env['TENSORANT_RUN_TOKEN']}"},
        timeout=30,
    )
    assert r.status_code == 202, r.text


@pytest.mark.parametrize("case", list(BAD_ADAPTERS))
def test_r7_a_bad_adapter_goes_to_needs_recovery_with_its_reason_and_the_pod_is_retained(
    world: tuple[Api, RunPodConsole, Org, dict[str, Any], dict[str, Any]], case: str
) -> None:
    api, console, org, config, creds = world
    reason, spoil = BAD_ADAPTERS[case]
    run_id, env = _act_as_trainer(api, console, org, config, creds)
    _report_exported(api, run_id, env, spoil(lora_zip(QWEN_7B)))
    body = wait_state(org, run_id, "needs_recovery")
    assert body["state_reason"] == reason, (case, body)
    assert body["adapter"] is None
    body = until(
        lambda: (
            (b := org.member.get(f"/v1/runs/{run_id}").json())["cleanup"]["pod_status"] == "stopped"
            and b
        ),
        what="the Pod stopped",
    )
    pod = console.pods_of_run(run_id)[0]
    assert pod["status"] == "EXITED"  # stopped and retained, not terminated
    items = org.member.get("/v1/cleanup").json()["items"]
    assert ("retained", run_id) in [(i["kind"], i["run_id"]) for i in items]
    events = org.auditor.get(f"/v1/runs/{run_id}/events", params={"limit": 500}).json()
    failed = [e for e in events["events"] if e["type"] == "AdapterVerificationFailed"]
    assert failed and failed[0]["data"]["reason"] == reason, failed


def test_r7_a_valid_lora_for_the_run_s_base_model_verifies_and_the_pod_is_released(
    world: tuple[Api, RunPodConsole, Org, dict[str, Any], dict[str, Any]],
) -> None:
    api, console, org, config, creds = world
    run_id, env = _act_as_trainer(api, console, org, config, creds)
    # R6: a trainer's retried log batch (its first answer lost) is stored once.
    trainer = api.client(env["TENSORANT_RUN_TOKEN"])
    batch = {"lines": [{"text": "retried line"}], "batch": "3f2c1e9a-retried"}
    first = trainer.post(f"/v1/trainer/runs/{run_id}/logs", json=batch)
    again = trainer.post(f"/v1/trainer/runs/{run_id}/logs", json=batch)
    assert first.status_code == again.status_code == 202, first.text
    assert first.json() == again.json()
    data = lora_zip(QWEN_7B)
    _report_exported(api, run_id, env, data)
    body = wait_state(org, run_id, "succeeded")
    assert body["adapter"]["sha256"] == hashlib.sha256(data).hexdigest()
    until(lambda: console.pods_of_run(run_id)[0]["status"] == "TERMINATED", what="Pod terminated")
    lines = org.member.get(f"/v1/runs/{run_id}/logs", params={"limit": 1000}).json()["lines"]
    assert [line["text"] for line in lines].count("retried line") == 1
    # The run ended, so the token its Pod holds stops working on every callback.
    for path, report in (
        ("logs", {"lines": [{"text": "after the end"}], "batch": "after-the-end"}),
        ("progress", {"phase": "training", "step": 1, "total_steps": 6}),
        ("failed", {"reason": "trainer_crashed", "detail": "late"}),
    ):
        late = trainer.post(f"/v1/trainer/runs/{run_id}/{path}", json=report)
        problem(late, 401, "token-expired")
    assert org.member.get(f"/v1/runs/{run_id}").json()["state"] == "succeeded"
