"""`tensorant demo`, second half: a trial run, a failed export and its recovery, the cost report."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from entrypoints.demo.walk import StepFailed, Walk, expect
from runpod_sandbox import Sandbox

A100 = "NVIDIA A100 80GB PCIe"


def wait_state(
    client: httpx.Client, run_id: str, *states: str, timeout: float = 60
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    run: dict[str, Any] = {}
    while time.monotonic() < deadline:
        run = expect(client.get(f"/v1/runs/{run_id}"), 200)
        if run["state"] in states:
            return run
        if run["ended_at"] is not None:  # the run ended: the states waited for cannot come
            break
        time.sleep(0.2)
    raise StepFailed(f"run is {run.get('state')} ({run.get('state_reason')}), expected {states}")


def walk_training(  # noqa: PLR0915 - one nested step per line of the guide
    client: httpx.Client, sandbox: Sandbox, out_dir: Path, walk: Walk, work_dir: Path
) -> None:
    """The guide's 'Verify a first training trial' and 'Recovery and billing', then the report."""
    ctx: dict[str, Any] = {}

    def tiny_model() -> str:
        volume = expect(client.get("/v1/connections"), 200)["storage"]["volume_id"]
        ctx["data"] = make_tiny_model(work_dir)
        for path in sorted((work_dir / "models" / "tiny").iterdir()):
            sandbox.write_volume_file(volume, f"models/tiny/{path.name}", path.read_bytes())
        size = sum(p.stat().st_size for p in (work_dir / "models" / "tiny").iterdir())
        return (
            f"a randomly initialised Llama-architecture model ({size // 1024} KiB) and its "
            f"tokenizer, saved to the volume {volume} as models/tiny"
        )

    def dataset() -> str:
        project = expect(client.get("/v1/projects"), 200)["items"][0]
        dv = expect(
            client.post(
                f"/v1/projects/{project['id']}/datasets",
                data={"name": "colours", "version": "1"},
                files={"file": ("colours.jsonl", ctx["data"].read_bytes(), "application/jsonl")},
            ),
            201,
        )
        ctx["config"] = {
            "project_id": project["id"],
            "dataset_version_id": dv["id"],
            "kind": "trial",
            "base_model": "storage:models/tiny",
            "gpu_type_id": A100,
            "gpu_count": 1,
            "price_limit_per_hour": "2.00",
            "max_runtime_minutes": 30,
        }
        return (
            f"uploaded, read back and checked: {dv['name']} v{dv['version']} "
            f"({dv['row_count']} rows, sha256 {dv['sha256'][:12]}…)"
        )

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

    def trains() -> str:
        losses = watch_losses(client, ctx["run"])
        if len(losses) < 2 or losses[-1][1] >= losses[0][1]:
            raise StepFailed(f"the loss did not fall: {losses}")
        (s0, l0), (s1, l1) = losses[0], losses[-1]
        return f"the real trainer on the CPU: loss {l0:.3f} at step {s0} -> {l1:.3f} at step {s1}"

    def logs() -> str:
        lines = 0
        with client.stream("GET", f"/v1/runs/{ctx['run']}/logs/stream", timeout=90) as s:
            for raw in s.iter_lines():
                if raw.startswith("event: log"):
                    lines += 1
        return f"streamed {lines} training log lines until the run ended"

    def released() -> str:
        run = wait_state(client, ctx["run"], "succeeded", timeout=120)
        if not run["adapter"] or run["cleanup"]["pod_status"] != "terminated":
            raise StepFailed(f"adapter {run['adapter']}, Pod {run['cleanup']['pod_status']}")
        ctx["first_pod"] = run["pod_id"]
        return (
            f"AdapterVerified (sha256 {run['adapter']['sha256'][:12]}…), then the Pod was "
            f"released; cost ${run['cost_so_far']}"
        )

    def deploy() -> str:
        dep = expect(client.post("/v1/deployments", json={"run_id": ctx["run"]}), 202)
        if dep["state"] != "ready":
            raise StepFailed(f"the deployment is {dep['state']}: {dep['failed_reason']}")
        ctx["deployment"] = dep["id"]
        return (
            f"Serverless endpoint {dep['endpoint_id']} serves {dep['adapter_name']} from the "
            "volume's serving directory (minimum workers 0: nothing bills while idle)"
        )

    def chat() -> str:
        ask = {
            "messages": [{"role": "user", "content": "What colour is the sky?"}],
            "temperature": 0,
            "max_tokens": 12,
        }
        path = f"/v1/deployments/{ctx['deployment']}/chat/completions"
        answer = expect(client.post(path, json=ask, timeout=180), 200)
        text = answer["choices"][0]["message"]["content"]
        return (
            f"a cold start loaded the tiny model and the adapter with peft; at temperature 0 it "
            f"answered {text!r} ({answer['usage']['completion_tokens']} tokens)"
        )

    def undeploy() -> str:
        dep = expect(client.delete(f"/v1/deployments/{ctx['deployment']}"), 202)
        left = sandbox.model.serverless.live() if sandbox.model.serverless else []
        if dep["state"] != "deleted" or left:
            raise StepFailed(f"the deployment is {dep['state']}; RunPod lists {left}")
        return "the adapter left the volume and RunPod no longer lists the endpoint"

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
        offered = sorted(a for a, allowed in run["actions"].items() if allowed)
        if not run["actions"]["recover_verify"]:
            raise StepFailed(f"the run offers {offered}, not recover_verify")
        return (
            f"export failed: Pod {run['pod_id']} stopped, files retained "
            f"({run['state_reason']}); the run offers {', '.join(offered)}"
        )

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
        if any(run["actions"].values()):
            raise StepFailed(f"a succeeded run still offers {run['actions']}")
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
        ("A tiny base model is made on the spot", tiny_model),
        ("A dataset is uploaded and checked", dataset),
        ("GPUs are listed with their eligibility", gpus),
        ("A T4 is refused", t4_refused),
        ("A trial draft is saved", save_draft),
        ("Launch needs an explicit confirmation", confirm_needed),
        ("The trial launches after confirmation", launch),
        ("The trial trains and its loss falls", trains),
        ("Training logs stream", logs),
        ("The adapter is verified and the Pod released", released),
        ("The adapter is deployed to a Serverless endpoint", deploy),
        ("It answers a chat completion through Tensorant", chat),
        ("The deployment is deleted until RunPod no longer lists it", undeploy),
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


def make_tiny_model(work_dir: Path) -> Path:
    """`python -m trainer.tiny`: the control plane never imports torch, so a child makes the
    model (and the demo dataset its tokenizer is trained on); returns the dataset's path."""
    out = work_dir / "models" / "tiny"
    dataset = work_dir / "colours.jsonl"
    done = subprocess.run(  # noqa: S603 - our own module, no shell
        [sys.executable, "-m", "trainer.tiny", str(out), "--write-dataset", str(dataset)],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if done.returncode != 0:
        raise StepFailed(f"trainer.tiny failed: {done.stderr[-500:]}")
    return dataset


def watch_losses(
    client: httpx.Client, run_id: str, timeout: float = 300
) -> list[tuple[int, float]]:
    """The (step, loss) pairs the run's progress showed while it trained."""
    deadline = time.monotonic() + timeout
    seen: dict[int, float] = {}
    while time.monotonic() < deadline:
        run = expect(client.get(f"/v1/runs/{run_id}"), 200)
        progress = run.get("progress") or {}
        if progress.get("loss") is not None and progress.get("step") is not None:
            seen.setdefault(int(progress["step"]), float(progress["loss"]))
        if run["state"] not in ("launching", "running"):
            break
        time.sleep(0.1)
    return sorted(seen.items())


def _sandbox_pods(sandbox: Sandbox) -> list[dict[str, Any]]:
    body = httpx.get(f"{sandbox.base_url}/_sandbox/pods", timeout=10).json()
    return list(body["pods"] if isinstance(body, dict) else body)
