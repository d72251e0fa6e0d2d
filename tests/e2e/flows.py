"""What a user and RunPod's console do, over HTTP only, for the e2e tests that must survive a
restructure of the code behind the API: our API through `Org` clients, the RunPod sandbox
through its `/_sandbox/*` admin routes and RunPod's own REST v2 API.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx

from entrypoints.server import serve_with_sandbox
from entrypoints.settings import Settings
from runpod_sandbox import Sandbox
from tests.builders import CHATS
from tests.e2e.conftest import Api, Org, connect, volume_spec
from trainer.protocol import Log, parse_report_line

A100 = "NVIDIA A100 80GB PCIe"
QWEN_7B = "Qwen/Qwen2.5-7B-Instruct"  # open on the Hub (P2 refuses gated models)
HOURS_PER_MONTH = Decimal(730)
ENDED = ("succeeded", "failed", "cancelled")


class RunPodConsole:
    """The sandbox's admin knobs and ledger, and RunPod's REST v2 API, as plain HTTP."""

    def __init__(self, base_url: str, api_key: str) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=30)
        self.api_key = api_key

    def close(self) -> None:
        self.http.close()

    def _ok(self, r: httpx.Response) -> Any:
        assert r.status_code < 300, f"{r.request.method} {r.request.url}: {r.status_code} {r.text}"
        return r.json() if r.content else None

    def scenario(self, name: str, count: int = 1) -> None:
        self._ok(self.http.post("/_sandbox/scenario", json={"scenario": name, "count": count}))

    def faults(self, **knobs: Any) -> None:
        self._ok(self.http.post("/_sandbox/faults", json=knobs))

    def clock(self) -> str:
        now: str = self._ok(self.http.get("/_sandbox/clock"))["now"]
        return now

    def freeze(self, frozen: bool = True) -> str:
        now: str = self._ok(self.http.post("/_sandbox/clock", json={"freeze": frozen}))["now"]
        return now

    def advance(self, seconds: float) -> str:
        body = {"advance_seconds": seconds}
        now: str = self._ok(self.http.post("/_sandbox/clock", json=body))["now"]
        return now

    def set_balance(self, amount: Decimal | str) -> Decimal:
        body = self._ok(self.http.post("/_sandbox/balance", json={"set": str(amount)}))
        return Decimal(body["balance"])

    def balance(self) -> Decimal:
        return Decimal(self._ok(self.http.get("/_sandbox/balance"))["balance"])

    def pods(self) -> list[dict[str, Any]]:
        return list(self._ok(self.http.get("/_sandbox/pods"))["pods"])

    def pod(self, pod_id: str) -> dict[str, Any]:
        return next(p for p in self.pods() if p["id"] == pod_id)

    def pods_of_run(self, run_id: str) -> list[dict[str, Any]]:
        return [p for p in self.pods() if p["name"] == f"tensorant-run-{run_id}"]

    def create_pod(self, **spec: Any) -> dict[str, Any]:
        """A Pod made in RunPod's console (not by us)."""
        r = self.http.post("/_sandbox/pods", json=spec)
        assert r.status_code == 201, r.text
        body: dict[str, Any] = r.json()
        return body

    def vanish(self, pod_id: str) -> None:
        self._ok(self.http.post(f"/_sandbox/pods/{pod_id}/vanish"))

    def ledger(self, start: str | None = None, end: str | None = None) -> dict[str, Any]:
        params = {k: v for k, v in (("from", start), ("to", end)) if v}
        body: dict[str, Any] = self._ok(self.http.get("/_sandbox/ledger", params=params))
        return body

    def rest(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """RunPod's REST v2 with the account's key, as a user's script would call it."""
        headers = {"Authorization": f"Bearer {self.api_key}"}
        return self.http.request(method, f"/v2{path}", headers=headers, **kw)

    def rest_pod(self, pod_id: str) -> dict[str, Any]:
        r = self.rest("GET", f"/pods/{pod_id}")
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body


@contextmanager
def private_stack(
    tmp_path_factory: Any, name: str, **overrides: Any
) -> Iterator[tuple[Api, RunPodConsole]]:
    """A sandbox and an API server (SQLite, embedded broker) of a module's own: its RunPod
    account, clock and Pods are seen by no other test."""
    data_dir: Path = tmp_path_factory.mktemp(name)
    settings = Settings(data_dir=data_dir, **overrides.pop("settings", {}))
    with Sandbox(startup_seconds=0.1, **overrides.pop("sandbox", {})) as box:
        options = {"reconcile_interval": 0.5, "projection_poll_interval": 0.2, **overrides}
        server, container = serve_with_sandbox(settings, box, **options)
        api = Api(f"sqlite-{name}", server.base_url, container, box, settings)
        console = RunPodConsole(box.base_url, box.credentials()["api_key"])
        try:
            yield api, console
        finally:
            console.close()
            api.close()
            server.stop()


def until(check: Callable[[], Any], timeout: float = 20, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what} (last: {value!r})")
        time.sleep(0.05)


def project_with_dataset(org: Org, name: str = "support-bot") -> tuple[str, str]:
    project = org.member.post("/v1/projects", json={"name": name})
    assert project.status_code == 201, project.text
    pid = project.json()["id"]
    return pid, upload_dataset(org, pid, f"{name}-chats")["id"]


def upload_dataset(
    org: Org, project_id: str, name: str, version: str = "1", data: bytes = CHATS
) -> dict[str, Any]:
    """P1: a multipart upload; the server stores, reads back and checks it (201 or a problem)."""
    r = org.member.post(
        f"/v1/projects/{project_id}/datasets",
        data={"name": name, "version": version},
        files={"file": (f"{name}.jsonl", data, "application/jsonl")},
    )
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def run_config(project_id: str, dataset_id: str, **changes: Any) -> dict[str, Any]:
    return {
        "project_id": project_id,
        "dataset_version_id": dataset_id,
        "kind": "trial",
        "base_model": QWEN_7B,
        "gpu_type_id": A100,
        "gpu_count": 1,
        "price_limit_per_hour": "2.00",
        "max_runtime_minutes": 60,
        **changes,
    }


def ready(
    api: Api, creds: dict[str, Any], storage: dict[str, Any] | None = None, name: str = "Acme"
) -> tuple[Org, dict[str, Any]]:
    """An organization with compute, storage, a project and a dataset version; a run config."""
    org = api.new_org(name)
    connect(org, creds)
    r = org.owner.put("/v1/storage", json=storage or volume_spec(creds))
    assert r.status_code == 200, r.text
    return org, run_config(*project_with_dataset(org))


def draft(org: Org, config: dict[str, Any], **changes: Any) -> dict[str, Any]:
    r = org.member.post("/v1/runs", json={**config, **changes})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    assert body["state"] == "draft"
    return body


def launch(org: Org, run_id: str, price: str = "1.64") -> None:
    r = org.member.post(
        f"/v1/runs/{run_id}/launch", json={"confirm": True, "accepted_price_per_hour": price}
    )
    assert r.status_code == 202, r.text


def wait_state(org: Org, run_id: str, *states: str, timeout: float = 30) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        body: dict[str, Any] = org.member.get(f"/v1/runs/{run_id}").json()
        if body["state"] in states:
            return body
        if body["state"] in ENDED:  # it will never get there: say so now
            raise AssertionError(f"run {run_id} ended {body['state']}, wanted {states}: {body}")
        return None

    found: dict[str, Any] = until(check, timeout, f"run {run_id} in {states}")
    return found


def history(org: Org, run_id: str) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = org.auditor.get(
        f"/v1/runs/{run_id}/events", params={"limit": 500}
    ).json()["events"]
    return events


def volume_objects(creds: dict[str, Any]) -> Any:
    """The bound network volume (nv7eu1ro4k, EU-RO-1) through its S3 API, as the trainer and
    the user reach it; bucket = volume id."""
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=creds["s3_endpoint_url"],
        region_name="EU-RO-1",
        aws_access_key_id=creds["s3_access_key_id"],
        aws_secret_access_key=creds["s3_secret_access_key"],
        config=Config(
            s3={"addressing_style": "path"},
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        ),
    )


def run_log_texts(org: Org, run_id: str) -> list[str]:
    """The run's stored log lines (R6), as a member reads them."""
    body = org.member.get(f"/v1/runs/{run_id}/logs", params={"limit": 1000}).json()
    return [x["text"] for x in body["lines"]]


def pod_output(sandbox: Sandbox, pod_id: str) -> list[str]:
    """The Pod's log as RunPod keeps it (container and system lines, in order)."""
    entries: list[Any] = sandbox.model.pod_logs.get(pod_id, [])
    return [line for _t, _seq, _source, line in entries]


def expected_log(output: list[str]) -> list[str]:
    """What a run's log must show of the Pod's output: report lines become their Log text
    (other reports show nothing), plain lines stay."""
    out = []
    for line in output:
        report = parse_report_line(line)
        if report is None:
            out.append(line)
        elif isinstance(report, Log):
            out.append(report.text)
    return out
