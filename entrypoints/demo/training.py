"""`tensorant demo`, second half: a trial run, a failed export and its recovery, the cost report."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx

from entrypoints.demo.walk import StepFailed, Walk, expect
from runpod_sandbox import Sandbox

A100 = "NVIDIA A100 80GB PCIe"
TERMINAL = ("succeeded", "failed", "cancelled")


def wait_state(
    client: httpx.Client, run_id: str, *states: str, timeout: float = 60
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    run: dict[str, Any] = {}
    while time.monotonic() < deadline:
        run = expect(client.get(f"/v1/runs/{run_id}"), 200)
        if run["state"] in states:
            return run
        if run["state"] in TERMINAL:
            break
        time.sleep(0.2)
    raise StepFailed(f"run is {run.get('state')} ({run.get('state_reason')}), expected {states}")


def walk_training(  # noqa: PLR0915 - one nested step per line of the guide
    client: httpx.Client, sandbox: Sandbox, out_dir: Path, walk: Walk
) -> None:
    """The guide's 'Verify a first training trial' and 'Recovery and billing', then the report."""
    ctx: dict[str, Any] = {}

    def dataset() -> str:
        project = expect(client.get("/v1/projects"), 200)["items"][0]
        dv = expect(
            client.post(
                f"/v1/projects/{project['id']}/datasets",
                json={
                    "name": "support-chats",
                    "version": "1",
                    "object_key": "datasets/chats-v1.jsonl",
                    "size_bytes": 52_000,
                    "row_count": 400,
                    "sha256": "5e" * 32,
                },
            ),
            201,
        )
        ctx["config"] = {
            "project_id": project["id"],
            "dataset_version_id": dv["id"],
            "kind": "trial",
            "base_model": "Qwen/Qwen2.5-7B-Instruct",
            "gpu_type_id": A100,
            "gpu_count": 1,
            "price_limit_per_hour": "2.00",
            "max_runtime_minutes": 30,
        }
        return f"dataset {dv['name']} v{dv['version']} ({dv['row_count']} rows)"

    def gpus() -> str:
        found = expect(client.get("/v1/gpus", params={"datacenter_id": "EU-RO-1"}), 200)["items"]
        ok = [g["display_name"] for g in found if g["eligible"]]
        t4 = next(g for g in found if g["id"] == "Tesla T4")
        ctx["price"] = next(g["price_per_hour"] for g in found if g["id"] == A100)
        return f"eligible in EU-RO-1: {', '.join(ok)}; T4: {t4['ineligible_reason']}"

    def t4_refused() -> str:
        r = client.post("/v1/runs", json={**ctx["config"], "gpu_type_id": "Tesla T4"})
        return f"refused (422 pre-ampere-gpu): {expect(r, 422, 'pre-ampere-gpu')['detail']}"

    def save_draft() -> str:
        run = expect(client.post("/v1/runs", json=ctx["config"]), 201)
        ctx["run"] = run["id"]
        pods = [p for p in _sandbox_pods(sandbox) if p["name"].endswith(run["id"])]
        if pods:
            raise StepFailed("saving a draft rented a Pod")
        return f"trial draft {run['id']} saved; no Pod rented"

    def confirm_needed() -> str:
        r = client.post(f"/v1/runs/{ctx['run']}/launch", json={})
        expect(r, 422, "confirmation-required")
        return "launch without confirmation refused (422 confirmation-required)"

    def launch() -> str:
        expect(
            client.post(
                f"/v1/runs/{ctx['run']}/launch",
                json={"confirm": True, "accepted_price_per_hour": ctx["price"]},
            ),
            202,
        )
        run = wait_state(
            client, ctx["run"], "running", "exporting", "verifying", "releasing", "succeeded"
        )
        return f"confirmed at ${ctx['price']}/hour; Pod {run['pod_id']} in {run['datacenter_id']}"

    def logs() -> str:
        lines = 0
        with client.stream("GET", f"/v1/runs/{ctx['run']}/logs/stream", timeout=90) as s:
            for raw in s.iter_lines():
                if raw.startswith("event: log"):
                    lines += 1
        return f"streamed {lines} training log lines until the run ended"

    def released() -> str:
        run = wait_state(client, ctx["run"], "succeeded")
        if not run["adapter"] or run["cleanup"]["pod_status"] != "terminated":
            raise StepFailed(f"adapter {run['adapter']}, Pod {run['cleanup']['pod_status']}")
        ctx["first_pod"] = run["pod_id"]
        return (
            f"AdapterVerified (sha256 {run['adapter']['sha256'][:12]}…), then the Pod was "
            f"released; cost ${run['cost_so_far']}"
        )

    def export_fails() -> str:
        sandbox.set_scenario("export_fails", 1)
        run = expect(client.post("/v1/runs", json=ctx["config"]), 201)
        ctx["run2"] = run["id"]
        expect(
            client.post(
                f"/v1/runs/{run['id']}/launch",
                json={"confirm": True, "accepted_price_per_hour": ctx["price"]},
            ),
            202,
        )
        run = wait_state(client, run["id"], "needs_recovery")
        return f"export failed: Pod {run['pod_id']} stopped, files retained ({run['state_reason']})"

    def cleanup_shows() -> str:
        items = expect(client.get("/v1/cleanup"), 200)["items"]
        retained = [i for i in items if i["kind"] == "retained" and i["run_id"] == ctx["run2"]]
        if not retained:
            raise StepFailed(f"cleanup shows {items}")
        storage = expect(client.get("/v1/connections"), 200)["storage"]
        return (
            f"cleanup lists the retained Pod (its own disk: "
            f"${retained[0]['storage_cost_per_hour']}/hour); its files live on the network "
            f"volume, which keeps billing ${storage['cost_per_month']}/month"
        )

    def recover() -> str:
        expect(client.post(f"/v1/runs/{ctx['run2']}/recovery/verify"), 202)
        run = wait_state(client, ctx["run2"], "succeeded")
        return f"the saved adapter verified; Pod released ({run['cleanup']['pod_status']})"

    def cleanup_empty() -> str:
        body = expect(client.get("/v1/cleanup"), 200)
        if body["items"]:
            raise StepFailed(f"cleanup still lists {body['items']}")
        live = [p for p in _sandbox_pods(sandbox) if p["status"] != "TERMINATED"]
        if live:
            raise StepFailed(f"RunPod still lists {live}")
        return "nothing left billing: cleanup is empty and RunPod lists no live Pod"

    def report() -> str:
        r = client.get("/v1/billing/export", params={"format": "focus-csv"})
        if r.status_code != 200:
            raise StepFailed(f"export answered {r.status_code}: {r.text[:200]}")
        target = out_dir / "tensorant-demo-costs.focus.csv"
        target.write_bytes(r.content)
        costs = expect(client.get("/v1/billing/costs", params={"group_by": "run"}), 200)
        rows = r.text.count("\n") - 1
        return f"FOCUS 1.2 CSV with {rows} hourly rows written to {target}; total ${costs['total']}"

    def audit() -> str:
        result = expect(client.get("/v1/audit/verify"), 200)
        if not result["ok"]:
            raise StepFailed(json.dumps(result))
        return (
            f"audit hash chain verified over {result['events_checked']} events;"
            f" head at position {result['position']}: {result['head'][:16]}… (keep it as an anchor)"
        )

    for title, run in (
        ("A dataset version is registered", dataset),
        ("GPUs are listed with their eligibility", gpus),
        ("A T4 is refused", t4_refused),
        ("A trial draft is saved", save_draft),
        ("Launch needs an explicit confirmation", confirm_needed),
        ("The trial launches after confirmation", launch),
        ("Training logs stream", logs),
        ("The adapter is verified and the Pod released", released),
        ("A run whose export fails is stopped and retained", export_fails),
        ("Cleanup shows the retained Pod", cleanup_shows),
        ("Verify the saved adapter recovers it", recover),
        ("Cleanup ends empty", cleanup_empty),
        ("The cost report is written", report),
        ("The audit history verifies", audit),
    ):
        walk.step(title, run)
        if walk.failed:
            return  # later steps build on earlier ones


def _sandbox_pods(sandbox: Sandbox) -> list[dict[str, Any]]:
    body = httpx.get(f"{sandbox.base_url}/_sandbox/pods", timeout=10).json()
    return list(body["pods"] if isinstance(body, dict) else body)
