"""V1 (acceptance 5), deterministically: one deployment makes one endpoint even when the process
driving it dies exactly between RunPod's create and our save.

`tensorant serve` runs in a process of its own (its API, embedded worker and reconcile tick in
one, as an installation without a broker runs it) against the sandbox in this one. The sandbox
creates the endpoint and holds the create's HTTP answer (`hold_creates`), so the test sees
"created, answer held" and SIGKILLs the process; a new `tensorant serve` on the same data
directory then drives the deployment left deploying on its reconcile tick. The sandbox must list
exactly one endpoint of that name, the one the deployment adopted (bound with `created: false`).
Removing the lookup by name before create from `DeploymentService` fails this test.
"""

from __future__ import annotations

import re
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from runpod_sandbox import Sandbox
from tests.chaos.conftest import wait_for
from tests.e2e.conftest import volume_spec
from tests.e2e.flows import project_with_dataset, run_config
from tests.e2e.served import Served, serve

pytestmark = [pytest.mark.slow, pytest.mark.shares, pytest.mark.timeout(600)]
SMALL_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


class _Clients:  # the owner's client in every role `project_with_dataset` asks for
    def __init__(self, client: httpx.Client) -> None:
        self.owner = self.member = self.auditor = client


def _ok(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, f"{r.request.method} {r.request.url}: {r.text}"
    return r.json()


def _succeeded_run(srv: Served, box: Sandbox) -> httpx.Client:
    """An organization with the sandbox's key, its network volume and a succeeded trial
    (the simulated trainer's verified adapter); the owner's client, with `run_id` on it."""
    creds = box.credentials()
    org_id = srv.cli("admin", "create-org", "Serving crash").strip().splitlines()[-1].strip()
    out = srv.cli("admin", "add-member", org_id, "o@crash.example", "--role", "owner")
    token = re.findall(r"tnt_\S+", out)[-1]
    api = httpx.Client(
        base_url=srv.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    )
    _ok(api.post("/v1/connections/runpod", json={"api_key": creds["api_key"]}), 201)
    _ok(api.put("/v1/storage", json=volume_spec(creds)))
    config = run_config(*project_with_dataset(_Clients(api)))  # type: ignore[arg-type]
    run_id = _ok(api.post("/v1/runs", json={**config, "base_model": SMALL_MODEL}), 201)["id"]
    box.set_scenario("success", 1)
    body = {"confirm": True, "accepted_price_per_hour": "1.64"}
    _ok(api.post(f"/v1/runs/{run_id}/launch", json=body), 202)
    wait_for(
        "the trial to succeed",
        lambda: _ok(api.get(f"/v1/runs/{run_id}"))["state"] == "succeeded",
        timeout=120,
    )
    api.headers["X-Run-Id"] = run_id  # where the test finds it again
    return api


def test_v1_a_process_killed_between_runpods_create_and_our_save_leaves_one_endpoint_adopted(
    tmp_path: Path,
) -> None:
    with Sandbox(startup_seconds=0.1) as box:
        creds = box.credentials()
        template = creds["s3_endpoint_template"]
        settings = {
            "runpod_api_base_url": box.base_url,
            "runpod_s3_endpoint_template": template,
            "s3_allow_endpoints": template.split("{dc}")[0],
            "serving_resume_after_s": "2",  # the restarted process drives it on at once
        }
        runpod = httpx.Client(
            base_url=box.base_url,
            headers={"Authorization": f"Bearer {creds['api_key']}"},
            timeout=30,
        )
        with serve(tmp_path, sandbox=False, **settings) as first:
            first.wait_healthy(120)
            api = _succeeded_run(first, box)
            run_id = api.headers.pop("X-Run-Id")
            _ok(runpod.post("/_sandbox/faults", json={"hold_creates": 1}))
            answers: list[Any] = []

            def deploy() -> None:  # its answer never comes: the process dies first
                try:
                    answers.append(api.post("/v1/deployments", json={"run_id": run_id}))
                except httpx.HTTPError as e:
                    answers.append(e)

            asked = threading.Thread(target=deploy, daemon=True)
            asked.start()
            held = wait_for(
                "RunPod to hold the endpoint's create",
                lambda: _ok(runpod.get("/_sandbox/held"))["held"],
            )
            [name] = [h["name"] for h in held]
            assert name.startswith("tensorant-serve-")
            [dep] = _ok(api.get("/v1/deployments"))
            assert dep["state"] == "deploying" and dep["endpoint_id"] is None  # not saved yet
            first.proc.send_signal(signal.SIGKILL)  # between RunPod's create and our save
            first.proc.wait(10)
            asked.join(30)
            assert answers and isinstance(answers[0], httpx.HTTPError), answers
        _ok(runpod.post("/_sandbox/held/release", json={}))  # to nobody: its client is dead
        [made] = [e for e in _ok(runpod.get("/v2/serverless")) if e["name"] == name]

        with serve(tmp_path, sandbox=False, **settings) as second:
            second.wait_healthy(120)
            again = httpx.Client(base_url=second.base_url, headers=api.headers, timeout=60)
            adopted = wait_for(
                "the restarted process to adopt the endpoint",
                lambda: (
                    (d := _ok(again.get(f"/v1/deployments/{dep['id']}")))["state"] == "ready" and d
                ),
            )
            assert adopted["endpoint_id"] == made["id"]
            named = [e["id"] for e in _ok(runpod.get("/v2/serverless")) if e["name"] == name]
            assert named == [made["id"]], "one deployment made more than one endpoint"

            def bound() -> list[bool]:  # the audit view may lag the deployment's
                events = _ok(again.get("/v1/audit/events", params={"type": "EndpointBound"}))
                return [e["data"]["created"] for e in events["events"]]

            assert wait_for("the adoption in the audit log", bound) == [False]  # adopted
