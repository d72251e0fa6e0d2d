"""`tensorant serve --sandbox --port <any>` as a user starts it: a process of its own, then a
trial completed over HTTP only, and its costs exported with
`tensorant export costs` beside the running server (API.md's CLI)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from runpod_sandbox.seed import seeded_credentials
from tests.e2e.conftest import volume_spec
from tests.e2e.flows import project_with_dataset, run_config
from tests.e2e.served import Served, serve

pytestmark = pytest.mark.slow


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[Served, int, int]]:
    with serve(tmp_path) as process:
        yield process, process.port, process.sandbox_port


def _ok(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, f"{r.request.method} {r.request.url}: {r.text}"
    return r.json()


class _Org:
    """The owner's token stands in for every role the flow helpers use."""

    def __init__(self, client: httpx.Client) -> None:
        self.owner = self.member = self.auditor = client


def test_serve_on_any_port_completes_a_trial_and_says_how_reports_arrive(
    served: tuple[Served, int, int],
) -> None:
    out, port, sandbox_port = served
    token = out.wait_for(r"Owner token \(shown once\): (tnt_\S+)").group(1)
    org_id = out.wait_for(r"Created organization (\S+)").group(1)
    out.wait_for(rf"callbacks at http://127\.0\.0\.1:{port}\b")
    out.wait_for(r"storage mailbox")
    base = f"http://127.0.0.1:{port}"
    creds = seeded_credentials(sandbox_port)
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=base, headers=headers, timeout=30) as api:
        deadline = time.monotonic() + 60
        while True:
            try:
                if api.get("/healthz").status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, out.output
            time.sleep(0.2)
        assert out.proc.poll() is None, out.output  # ours answered, not another server
        _ok(api.post("/v1/connections/runpod", json={"api_key": creds["api_key"]}), 201)
        _ok(api.put("/v1/storage", json=volume_spec(creds)))
        config = run_config(*project_with_dataset(_Org(api)))  # type: ignore[arg-type]
        run = _ok(api.post("/v1/runs", json=config), 201)
        launched = api.post(
            f"/v1/runs/{run['id']}/launch",
            json={"confirm": True, "accepted_price_per_hour": "1.64"},
        )
        assert launched.status_code == 202, launched.text
        deadline = time.monotonic() + 90
        while True:
            body = _ok(api.get(f"/v1/runs/{run['id']}"))
            if body["state"] in ("succeeded", "failed", "cancelled"):
                break
            assert time.monotonic() < deadline, f"run still {body['state']}:\n{out.output}"
            time.sleep(0.3)
        assert body["state"] == "succeeded", body
        assert body["adapter"]["verified_at"]
        logs = _ok(api.get(f"/v1/runs/{run['id']}/logs"))
        assert logs["lines"], "the trainer's log lines reached the run"
        pod_id = body["pod_id"]
        assert pod_id
        # A period that has ended, so the file cannot change between the two reads.
        end = datetime.now(UTC).replace(microsecond=0)
        window = {"from": _iso(end - timedelta(days=1)), "to": _iso(end)}
        time.sleep(1.1)  # fixed-sleep-ok: the period must have ended
        # One format: the CLI hands --format to the same export as the API (each CLI start
        # costs seconds of imports); the formats themselves are tested with the API.
        target = Path(out.env["TENSORANT_DATA_DIR"]) / "costs.csv"
        printed = out.cli(
            "export", "costs", "--org", org_id, "--from", window["from"],
            "--to", window["to"], "--format", "focus-csv", "--output", str(target),
        )  # fmt: skip
        assert printed.strip() == str(target)
        via_api = api.get("/v1/billing/export", params={**window, "format": "focus-csv"})
        assert via_api.status_code == 200, via_api.text
        assert target.read_bytes() == via_api.content
        assert pod_id in target.read_text(), "the trial's Pod is in the FOCUS file"


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")
