"""R20 over HTTP: owners register webhook endpoints; a receiver on loopback gets a trial run's
state changes signed and verifiable; a receiver answering 500 sees retries with backoff, every
attempt visible in /v1/webhooks/{id}/deliveries.

The receivers are tiny threaded HTTP servers in the test process; the stack allow-lists their
loopback address for the SSRF guard (`TENSORANT_WEBHOOK_ALLOW_ENDPOINTS`), as the sandbox's S3
front is allow-listed for storage.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from domain.run import Run
from domain.webhook import verify_signature
from tests.e2e.conftest import Api, problem
from tests.e2e.flows import draft, launch, private_stack, ready, until, wait_state


@dataclass
class Received:
    at: float
    headers: dict[str, str]
    body: bytes

    @property
    def payload(self) -> dict[str, Any]:
        found: dict[str, Any] = json.loads(self.body)
        return found


@dataclass
class Receiver:
    """Records every POST; answers each with the next of `answers` (then 200)."""

    answers: list[int] = field(default_factory=list)
    got: list[Received] = field(default_factory=list)
    hold: threading.Event | None = None  # while set-able and unset, requests wait (a slow peer)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    receiver.got.append(
                        Received(time.monotonic(), {k: v for k, v in self.headers.items()}, body)
                    )
                    code = receiver.answers.pop(0) if receiver.answers else 200
                if receiver.hold is not None:
                    receiver.hold.wait(60)
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def of_type(self, kind: str) -> list[Received]:
        with self.lock:
            return [g for g in self.got if g.payload["type"] == kind]


@pytest.fixture(scope="module")
def receivers() -> Iterator[list[Receiver]]:
    made = [Receiver().start() for _ in range(2)]
    yield made
    for r in made:
        r.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, receivers: list[Receiver]) -> Iterator[Api]:
    allow = [r.url for r in receivers]
    with private_stack(
        tmp_path_factory,
        "webhooks",
        webhook_allow_endpoints=allow,
        webhook_backoff_base_s=0.4,
        webhook_backoff_max_s=5.0,
        webhook_timeout_s=5.0,
    ) as (api, _console):
        yield api


def _verified(secret: str, got: Received) -> dict[str, Any]:
    """What a receiver does (docs/webhooks.md): verify, then trust the body."""
    verify_signature(secret, got.headers["Tensorant-Signature"], got.body, time.time())
    assert got.headers["Idempotency-Key"] == got.headers["Tensorant-Event-Id"]
    assert got.payload["id"] == got.headers["Tensorant-Event-Id"]
    return got.payload


def test_r20_only_owners_register_and_the_url_passes_the_ssrf_guard(
    stack: Api, receivers: list[Receiver]
) -> None:
    org, other = stack.new_org(), stack.new_org("Other")
    for role in ("member", "auditor", "finance"):
        refused = org.clients[role].post("/v1/webhooks", json={"url": receivers[0].url})
        problem(refused, 403, "forbidden")
        problem(org.clients[role].get("/v1/webhooks"), 403, "forbidden")
    for url in (
        "http://hooks.example.com/x",  # not https
        "https://127.0.0.1:9/x",  # loopback, not allow-listed
        "https://169.254.169.254/latest",  # cloud metadata
        "https://user:pw@hooks.example.com/x",
    ):
        problem(org.owner.post("/v1/webhooks", json={"url": url}), 422, "unsafe-webhook-url")
    bad_type = org.owner.post("/v1/webhooks", json={"url": receivers[0].url, "events": ["x"]})
    assert bad_type.status_code == 422
    made = org.owner.post(
        "/v1/webhooks", json={"url": receivers[0].url, "events": ["run.state_changed"]}
    )
    assert made.status_code == 201, made.text
    hook = made.json()
    assert hook["secret"].startswith("whsec_") and hook["events"] == ["run.state_changed"]
    listed = org.owner.get("/v1/webhooks").json()
    assert [h["id"] for h in listed] == [hook["id"]]
    assert hook["secret"] not in org.owner.get("/v1/webhooks").text  # shown once only
    audit = org.auditor.get("/v1/audit/events", params={"limit": 500})
    assert audit.status_code == 200 and "WebhookRegistered" in audit.text  # recorded, and
    assert hook["secret"] not in audit.text  # the event holds no secret
    # Kept in the vault only, encrypted: no stored byte anywhere holds it in plain text.
    stack.container.catch_up()
    stored = [f for f in stack.settings.data_dir.rglob("*") if f.is_file()]
    assert any(f.name.startswith("vault") for f in stored)
    assert not [f.name for f in stored if hook["secret"].encode() in f.read_bytes()]
    # Another organization's endpoint is a missing one (A4).
    for call in (
        other.owner.get(f"/v1/webhooks/{hook['id']}/deliveries"),
        other.owner.delete(f"/v1/webhooks/{hook['id']}"),
    ):
        problem(call, 404, "not-found")
    assert org.owner.delete(f"/v1/webhooks/{hook['id']}").status_code == 204
    assert org.owner.get("/v1/webhooks").json() == []
    problem(org.owner.get(f"/v1/webhooks/{hook['id']}/deliveries"), 404, "not-found")


def test_r20_a_trial_runs_state_changes_arrive_signed_in_order(
    stack: Api, receivers: list[Receiver]
) -> None:
    receiver = receivers[0]
    org, config = ready(stack, stack.sandbox.credentials())
    made = org.owner.post("/v1/webhooks", json={"url": receiver.url})
    assert made.status_code == 201, made.text
    secret, hook_id = made.json()["secret"], made.json()["id"]
    run = draft(org, config)
    launch(org, run["id"])
    wait_state(org, run["id"], "succeeded", timeout=60)

    def mine() -> list[dict[str, Any]]:
        return [
            p
            for p in (g.payload for g in receiver.of_type("run.state_changed"))
            if p["data"]["run_id"] == run["id"]
        ]

    until(lambda: any(p["data"]["state"] == "succeeded" for p in mine()), 20, "succeeded")
    got = [
        _verified(secret, g)
        for g in receiver.of_type("run.state_changed")
        if g.payload["data"]["run_id"] == run["id"]
    ]
    states = [p["data"]["state"] for p in got]
    # Every state the run entered (the aggregate's own record), in order, once each.
    entered = stack.container.services.log.load(Run, run["id"]).history
    assert states == entered, (states, entered)
    assert states[0] == "draft" and states[-1] == "succeeded" and "verifying" in states
    assert [p["data"]["previous_state"] for p in got] == [None, *states[:-1]]
    assert all(p["organization_id"] == org.id for p in got)
    # A tampered body or another secret does not verify.
    first = receiver.of_type("run.state_changed")[0]
    with pytest.raises(ValueError, match="signature"):
        verify_signature(
            secret, first.headers["Tensorant-Signature"], first.body + b" ", time.time()
        )
    with pytest.raises(ValueError, match="replay window"):
        verify_signature(
            secret, first.headers["Tensorant-Signature"], first.body, time.time() + 3600
        )
    listed = org.owner.get(f"/v1/webhooks/{hook_id}/deliveries").json()["deliveries"]
    runs = [d for d in listed if d["type"] == "run.state_changed"]
    assert len(runs) == len(states)
    assert all(d["status"] == "delivered" and d["last_status_code"] == 200 for d in runs)
    assert secret not in org.owner.get(f"/v1/webhooks/{hook_id}/deliveries").text


def test_r20_a_receiver_answering_500_sees_retries_with_growing_gaps(
    stack: Api, receivers: list[Receiver]
) -> None:
    receiver = receivers[1]
    org, config = ready(stack, stack.sandbox.credentials())
    made = org.owner.post(
        "/v1/webhooks", json={"url": receiver.url, "events": ["run.state_changed"]}
    )
    secret, hook_id = made.json()["secret"], made.json()["id"]
    with receiver.lock:
        receiver.answers[:] = [500, 500, 500]
    run = draft(org, config)

    def attempts() -> list[Received]:
        return [
            g
            for g in receiver.of_type("run.state_changed")
            if g.payload["data"]["run_id"] == run["id"]
        ]

    until(lambda: len(attempts()) >= 4, 30, "four attempts")

    def settled() -> dict[str, Any] | None:
        listed = org.owner.get(f"/v1/webhooks/{hook_id}/deliveries").json()["deliveries"]
        return listed[0] if listed and listed[0]["status"] == "delivered" else None

    delivery = until(settled, 10, "the delivery recorded as delivered")
    tries = attempts()
    assert len(tries) == 4  # delivered on the fourth: no more
    assert len({t.headers["Idempotency-Key"] for t in tries}) == 1  # one event, one key
    for t in tries:
        _verified(secret, t)
    gaps = [b.at - a.at for a, b in itertools.pairwise(tries)]
    # backoff 0.4 s, 0.8 s, 1.6 s (polled every 0.2 s): each gap longer than the one before
    assert gaps[0] >= 0.35 and gaps[1] > gaps[0] and gaps[2] > gaps[1], gaps
    assert delivery["attempts"] == 4 and delivery["last_status_code"] == 200
    assert [a["status_code"] for a in delivery["attempt_log"]] == [500, 500, 500, 200]
    assert delivery["attempt_log"][0]["error"] == "the endpoint answered HTTP 500"
    assert delivery["last_error"] is None and delivery["next_attempt_at"] is None
