"""`tensorant demo` walks the whole guide through the HTTP API and exits 0.

It runs once in the suite, and the test does not take its word for it: afterwards it looks
for itself at what the demo left at RunPod (the sandbox's Pods, bill and volume), in its data
directory (reopened by a server of its own, read as an auditor) and in the FOCUS file.
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
import signal
import subprocess
import sys
from datetime import datetime, timedelta
from decimal import Decimal
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from adapters.trainer_bundle import build_bundle
from application.run_settings import PUBLIC_BASE_IMAGE
from entrypoints.demo.run import run_demo
from entrypoints.server import serve_with_sandbox
from entrypoints.settings import Settings
from runpod_sandbox import Sandbox
from tests.browser.conftest import ConsoleHttp
from tests.e2e.conftest import Api
from tests.e2e.flows import RunPodConsole, volume_objects
from trainer.protocol.boot import ENV_BUNDLE, volume_bundle_url

TRAINER_NAME = "tensorant-run-"


@pytest.mark.slow
@pytest.mark.timeout(900)  # the real trainer on a busy two-core machine
def test_the_demo_walks_the_guide_and_leaves_exactly_what_the_guide_says(tmp_path: Path) -> None:
    out, data = StringIO(), tmp_path / "data"
    with Sandbox(trainer="real") as sandbox:
        code = run_demo(
            Console(file=out, width=200), out_dir=tmp_path, sandbox=sandbox, data_dir=data
        )
        assert code == 0, out.getvalue()
        assert "✗" not in out.getvalue()
        creds = sandbox.credentials()
        console = RunPodConsole(sandbox.base_url, creds["api_key"])
        try:
            pods = at_runpod(console)
            ledger = {p["pod_id"]: Decimal(p["total"]["exact"]) for p in console.ledger()["pods"]}
            rows = focus_rows(tmp_path / "tensorant-demo-costs.focus.csv")
            runs = reopened(sandbox, data, rows[0]["SubAccountId"])
        finally:
            console.close()
        # One Pod per launch (the trial and the run whose export failed), none left billing.
        assert sorted(r["pod_id"] for r in runs) == sorted(pods)
        s3 = volume_objects(creds)
        for run in runs:
            stored = s3.get_object(Bucket="nv7eu1ro4k", Key=run["adapter"]["object_key"])
            assert hashlib.sha256(stored["Body"].read()).hexdigest() == run["adapter"]["sha256"]
            # The report's cost of each Pod is what RunPod billed for it (our timestamps are
            # a create and a confirmation away from RunPod's: well under a second of an A100).
            billed = sum(Decimal(r["BilledCost"]) for r in rows if r["ResourceId"] == run["pod_id"])
            assert abs(billed - ledger[run["pod_id"]]) < Decimal("0.0005"), (billed, ledger)
            assert {r["x_RunId"] for r in rows if r["ResourceId"] == run["pod_id"]} == {run["id"]}


def at_runpod(console: RunPodConsole) -> list[str]:
    """The demo's Pods as RunPod has them: trainer Pods on the bound volume, all terminated."""
    pods = [p for p in console.pods() if p["name"].startswith(TRAINER_NAME)]
    assert len(pods) == 2, pods
    bundle = build_bundle()  # no image of ours: the public one, and the bundle's boot
    for p in pods:
        assert p["status"] == "TERMINATED", p
        assert p["image_name"] == PUBLIC_BASE_IMAGE and p["network_volume_id"] == "nv7eu1ro4k"
        assert p["start_command"] == bundle.start_command
        assert p["env"][ENV_BUNDLE] == volume_bundle_url(bundle.version)
    return [p["id"] for p in pods]


def focus_rows(path: Path) -> list[dict[str, str]]:
    """The FOCUS file as written: hourly UTC charge periods, USD, Pods and the volume."""
    with path.open() as f:
        rows = list(csv.DictReader(f))
    assert rows and {"BilledCost", "ChargePeriodStart", "x_RunId", "SubAccountId"} <= set(rows[0])
    for r in rows:
        start = datetime.fromisoformat(r["ChargePeriodStart"].replace("Z", "+00:00"))
        end = datetime.fromisoformat(r["ChargePeriodEnd"].replace("Z", "+00:00"))
        assert (start.minute, start.second, end - start) == (0, 0, timedelta(hours=1)), r
        assert r["BillingCurrency"] == "USD" and Decimal(r["BilledCost"]) >= 0
    assert {r["ResourceType"] for r in rows} == {"GPU Pod", "Network Volume"}
    assert len({r["SubAccountId"] for r in rows}) == 1
    return rows


def reopened(sandbox: Sandbox, data: Path, org_id: str) -> list[dict[str, Any]]:
    """The demo's data directory served again, read by a new auditor of its organization."""
    server, container = serve_with_sandbox(Settings(data_dir=data), sandbox)
    api = Api("demo-data", server.base_url, container, sandbox, Settings(data_dir=data))
    try:
        organizations = container.services.organizations
        token = organizations.add_member(org_id, "inspector@example.com", "auditor").token
        container.catch_up()  # as `tensorant admin add-member` does before it exits
        auditor = api.client(token)
        answer = auditor.get("/v1/runs")
        assert answer.status_code == 200, answer.text
        runs: list[dict[str, Any]] = answer.json()
        assert [r["state"] for r in runs] == ["succeeded", "succeeded"], runs
        assert all(r["gpu_type_id"] == "NVIDIA A100 80GB PCIe" for r in runs)  # the T4: refused
        recovered = [r for r in runs if "PodStopped" in types(auditor, r["id"])]
        assert len(recovered) == 1
        path = types(auditor, recovered[0]["id"])
        assert (
            path.index("PodStopped")
            < path.index("RecoveryRequested")
            < path.index("AdapterVerified")
        )
        assert auditor.get("/v1/cleanup").json()["items"] == []
        cards = auditor.get("/v1/connections").json()
        assert cards["compute"]["status"] == "connected" and cards["compute"]["rotated_at"]
        assert cards["storage"]["volume_id"] == "nv7eu1ro4k" and cards["storage"]["locked"]
        verified = auditor.get("/v1/audit/verify").json()
        assert verified["ok"] and verified["first_bad_position"] is None, verified
        return runs
    finally:
        api.close()
        server.stop()


def types(client: Any, run_id: str) -> list[str]:
    events = client.get(f"/v1/runs/{run_id}/events", params={"limit": 500}).json()["events"]
    return [e["type"] for e in events]


def test_the_console_script_offers_the_demo() -> None:
    """The README's first command is wired (the demo itself ran in the test above)."""
    exe = Path(sys.executable).parent / "tensorant"
    result = subprocess.run(
        [str(exe), "demo", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert "Walk the guide end to end" in result.stdout


def test_the_demo_prints_a_read_only_token_for_its_console(tmp_path: Path) -> None:
    """`tensorant demo` names its console and prints a token that signs in to it, read-only
    (an auditor's): pages open, changes are refused. The demo is interrupted once checked."""
    exe = Path(sys.executable).parent / "tensorant"
    demo = subprocess.Popen(
        [str(exe), "demo"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "100"},
    )
    try:
        assert demo.stdout is not None
        lines: list[str] = []
        for line in demo.stdout:  # until the token's line (the line after "Token:")
            lines.append(line.rstrip("\n"))
            if len(lines) >= 2 and lines[-2].endswith("Token:"):
                break
        text = "\n".join(lines)
        assert "It is read-only" in text and "can change nothing" in text, text
        url = re.search(r"Web console: (http://[^\s]+)/ ", text)
        assert url, text
        token = lines[-1].strip()
        page = ConsoleHttp(url.group(1), token)  # signs in, or fails
        try:
            runs = page.http.get("/runs")
            assert runs.status_code == 200 and "Tune → Runs" in runs.text
            assert "(auditor)" in runs.text
            refused = page.post("/projects", {"name": "watcher-was-here"})
            assert refused.status_code == 403 and "Your role does not allow this" in refused.text
        finally:
            page.close()
    finally:
        demo.send_signal(signal.SIGINT)
        try:
            demo.wait(timeout=60)
        except subprocess.TimeoutExpired:
            demo.kill()
            demo.wait(timeout=30)
