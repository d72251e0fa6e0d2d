"""`tensorant demo`: the guide, walked through the HTTP API as a real client, against the sandbox.

First half: connections, storage, projects (here); second half: training, recovery, cleanup,
the cost report and the audit check (`api/demo_training.py`).
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from adapters.settings import Settings
from api.server import serve_with_sandbox
from runpod_sandbox import Sandbox

PROBLEMS = "https://tensorant.dev/problems/"


class StepFailed(Exception):
    """A step did not behave as the guide says."""


def expect(response: httpx.Response, status: int, problem: str | None = None) -> dict[str, Any]:
    if response.status_code != status:
        raise StepFailed(f"expected {status}, got {response.status_code}: {response.text[:200]}")
    if problem is not None and response.json().get("type") != PROBLEMS + problem:
        raise StepFailed(f"expected problem {problem}, got {response.json().get('type')}")
    if not response.content:
        return {}
    body = response.json()
    return body if isinstance(body, dict) else {"items": body}


@dataclass
class Walk:
    console: Console
    passed: int = 0
    failed: list[str] = field(default_factory=list)

    def step(self, title: str, run: Callable[[], str]) -> None:
        try:
            result = run()
        except (StepFailed, httpx.HTTPError, KeyError, ValueError) as e:
            self.failed.append(title)
            self.console.print(f"[red]✗[/red] {title}: [red]{e}[/red]")
            return
        self.passed += 1
        self.console.print(f"[green]✓[/green] {title}: {result}")


def walk_first_half(client: httpx.Client, creds: dict[str, Any], walk: Walk) -> None:
    """The guide's steps 1-4 (up to 'Create a project'), each checked against the contract."""

    def wrong_key() -> str:
        r = client.post("/v1/connections/runpod", json={"api_key": "rpa_" + secrets.token_hex(20)})
        return f"refused (422 invalid-key): {expect(r, 422, 'invalid-key')['detail']}"

    def read_only_key() -> str:
        r = client.post("/v1/connections/runpod", json={"api_key": creds["read_only_api_key"]})
        return f"flagged (422 read-only-key): {expect(r, 422, 'read-only-key')['detail']}"

    def right_key() -> str:
        r = client.post("/v1/connections/runpod", json={"api_key": creds["api_key"]})
        card = expect(r, 201)
        if card["status"] != "connected":
            raise StepFailed(f"card says {card['status']}")
        return (
            f"connected to {card['account_id']} with key {card['key_fingerprint']}, "
            f"balance ${card['balance']}, write permission {card['write_permission']}"
        )

    def rotate() -> str:
        r = client.post("/v1/connections/runpod/rotate", json={"api_key": creds["api_key"]})
        card = expect(r, 200)
        if not card["rotated_at"]:
            raise StepFailed("rotated_at is empty")
        return f"KeyRotated at {card['rotated_at']}, key {card['key_fingerprint']}"

    def volumes() -> str:
        found = expect(client.get("/v1/storage/volumes"), 200)["items"]
        return ", ".join(
            f"{v['id']} ({v['datacenter_id']}, {v['size_gb']} GB, "
            f"{'S3' if v['s3_api'] else 'no S3'})"
            for v in found
        )

    def non_s3() -> str:
        vol = next(v for v in creds["volumes"] if not v["s3_api"])
        r = client.put("/v1/storage", json=_volume(creds, vol["id"], vol["dataCenterId"]))
        expect(r, 422, "datacenter-without-s3")
        return f"{vol['id']} in {vol['dataCenterId']} refused (422 datacenter-without-s3)"

    def bind() -> str:
        vol = next(v for v in creds["volumes"] if v["s3_api"])
        card = expect(
            client.put("/v1/storage", json=_volume(creds, vol["id"], vol["dataCenterId"])), 200
        )
        return (
            f"storage check passed; VolumeBound {card['volume_id']} at {card['endpoint_url']}"
            f", {card['size_gb']} GB billing ${card['cost_per_month']}/month from now"
        )

    def project() -> str:
        p = expect(client.post("/v1/projects", json={"name": "support-bot"}), 201)
        return f"project {p['name']} ({p['id']})"

    def locked() -> str:
        card = expect(client.get("/v1/connections"), 200)["storage"]
        if not card["locked"]:
            raise StepFailed("the storage card is not locked")
        other = next(v for v in creds["volumes"][1:] if v["s3_api"])
        r = client.put("/v1/storage", json=_volume(creds, other["id"], other["dataCenterId"]))
        expect(r, 409, "storage-locked")
        return "the location is locked; moving it is refused (409 storage-locked)"

    for title, run in (
        ("A wrong key is refused", wrong_key),
        ("A read-only key is flagged", read_only_key),
        ("The right key connects", right_key),
        ("The key is rotated", rotate),
        ("Volumes are discovered", volumes),
        ("A datacenter without S3 is refused", non_s3),
        ("The volume is bound after its storage check", bind),
        ("A project is created", project),
        ("The storage location is locked", locked),
    ):
        walk.step(title, run)


def _volume(creds: dict[str, Any], volume_id: str, datacenter_id: str) -> dict[str, Any]:
    return {
        "kind": "runpod_volume",
        "volume_id": volume_id,
        "datacenter_id": datacenter_id,
        "access_key_id": creds["s3_access_key_id"],
        "secret_access_key": creds["s3_secret_access_key"],
    }


def run_demo(
    console: Console | None = None,
    out_dir: Path | None = None,
    *,
    sandbox: Sandbox | None = None,
    data_dir: Path | None = None,
) -> int:
    """Start sandbox + API on a temporary data directory, walk the guide; 0 when all passed.

    A given `sandbox` and `data_dir` outlive the demo, so what it left behind can be inspected
    (its Pods and bill at RunPod, its event log) without taking its word for it.
    """
    from api.demo_training import walk_second_half

    console = console or Console()
    walk = Walk(console)
    for noisy in ("httpx", "tensorant.http", "tensorant.runs", "dramatiq"):
        logging.getLogger(noisy).setLevel(logging.WARNING)  # the step lines are the output
    with contextlib.ExitStack() as owned:
        tmp = data_dir or owned.enter_context(tempfile.TemporaryDirectory(prefix="tensorant-demo-"))
        sandbox = sandbox or owned.enter_context(Sandbox())
        settings = Settings(data_dir=Path(tmp), reconcile_interval=1.0)
        server, container = serve_with_sandbox(settings, sandbox)
        try:
            org_id = container.app.create_organization("Demo organization")
            owner = container.app.add_member(org_id, "owner@demo.tensorant.dev", "owner")
            container.catch_up()
            console.print(
                f"[bold]Tensorant demo[/bold]: API {server.base_url}, RunPod sandbox "
                f"{sandbox.base_url}, data in {tmp}"
            )
            with httpx.Client(
                base_url=server.base_url,
                timeout=30,
                headers={"Authorization": f"Bearer {owner.token}"},
            ) as client:
                walk_first_half(client, sandbox.credentials(), walk)
                if not walk.failed:
                    walk_second_half(client, sandbox, out_dir or Path.cwd(), walk)
        finally:
            server.stop()
    total = walk.passed + len(walk.failed)
    if walk.failed:
        console.print(f"[red]{len(walk.failed)} of {total} steps failed[/red]")
        return 1
    console.print(f"[green]All {total} steps behaved as the guide says.[/green]")
    return 0
