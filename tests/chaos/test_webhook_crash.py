"""R20 crash test: the process sending webhooks is killed with SIGKILL while a delivery is in
flight (the receiver has the request and has not answered). A process started again on the same
data directory delivers everything that remains: no state change is lost, and the one that was
in flight arrives again with the same event id and idempotency key (at-least-once).

`tensorant serve --sandbox` is the embedded stack: its process runs the API, the worker, the
relay and the webhook sender, so killing it kills the sender mid-delivery."""

from __future__ import annotations

import collections
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from domain.webhook import verify_signature
from runpod_sandbox.seed import seeded_credentials
from tests.conftest import require_postgres
from tests.e2e.conftest import _drop, _pg_schema, volume_spec
from tests.e2e.flows import project_with_dataset, run_config, until
from tests.e2e.served import serve

pytestmark = pytest.mark.slow


class _Org:
    """The owner's token stands in for every role the flow helpers use."""

    def __init__(self, client: httpx.Client) -> None:
        self.owner = self.member = self.auditor = client


class HeldReceiver:
    """Records every POST; holds the answers until `release` (a receiver slower than the
    sender's life), then answers 200."""

    def __init__(self) -> None:
        self.got: list[tuple[dict[str, str], bytes]] = []
        self.released = threading.Event()
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with receiver.lock:
                    receiver.got.append((dict(self.headers.items()), body))
                receiver.released.wait(60)
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass  # the sender died while we held its request

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    def received(self) -> list[tuple[dict[str, str], bytes]]:
        with self.lock:
            return list(self.got)

    def close(self) -> None:
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


def _ok(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, f"{r.request.method} {r.request.url}: {r.text}"
    return r.json() if r.content else None


def _healthy(api: httpx.Client) -> None:
    def up() -> bool:
        try:
            return api.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    until(up, 60, "the API")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database(request: pytest.FixtureRequest) -> Iterator[dict[str, str]]:
    """The embedded SQLite default, or a PostgreSQL schema of this test's own."""
    if request.param == "sqlite":
        yield {}
        return
    url = require_postgres()
    schema = _pg_schema(url)
    try:
        yield {"database_url": f"{url}?schema={schema}"}
    finally:
        _drop(url, schema)


@pytest.mark.timeout(300)
def test_r20_a_sender_killed_mid_delivery_loses_no_state_change(
    tmp_path: Path, database: dict[str, str]
) -> None:
    receiver = HeldReceiver()
    settings: dict[str, Any] = {
        "webhook_allow_endpoints": receiver.url,
        "webhook_backoff_base_s": "0.3",
        "webhook_timeout_s": "5",
        **database,
    }
    try:
        with serve(tmp_path, **settings) as first:
            token = first.owner_token()
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=first.base_url, headers=headers, timeout=30) as api:
                _healthy(api)
                creds = seeded_credentials(first.sandbox_port)
                _ok(api.post("/v1/connections/runpod", json={"api_key": creds["api_key"]}), 201)
                _ok(api.put("/v1/storage", json=volume_spec(creds)))
                config = run_config(*project_with_dataset(_Org(api)))  # type: ignore[arg-type]
                hook = _ok(
                    api.post(
                        "/v1/webhooks", json={"url": receiver.url, "events": ["run.state_changed"]}
                    ),
                    201,
                )
                kept = _ok(api.post("/v1/runs", json=config), 201)
                gone = _ok(api.post("/v1/runs", json=config), 201)
                assert api.delete(f"/v1/runs/{gone['id']}").status_code == 204
                until(receiver.received, 30, "the first delivery in flight")
                first.proc.kill()  # SIGKILL while the receiver holds the request
                first.proc.wait(10)
        in_flight = receiver.received()
        assert len(in_flight) == 1, "one delivery was in flight when the sender died"
        receiver.released.set()
        expected = {(kept["id"], "draft"), (gone["id"], "draft"), (gone["id"], "discarded")}
        with serve(tmp_path, **settings) as second:
            headers = {"Authorization": f"Bearer {token}"}
            with httpx.Client(base_url=second.base_url, headers=headers, timeout=30) as api:
                _healthy(api)

                def states() -> set[tuple[str, str]]:
                    return {
                        (p["data"]["run_id"], p["data"]["state"])
                        for p in (json.loads(b) for _h, b in receiver.received())
                    }

                until(lambda: states() >= expected, 60, "every state change delivered")

                def all_delivered() -> list[dict[str, Any]] | None:
                    listed = _ok(api.get(f"/v1/webhooks/{hook['id']}/deliveries"))["deliveries"]
                    done = all(d["status"] == "delivered" for d in listed)
                    return listed if done and len(listed) == len(expected) else None

                listed = until(all_delivered, 30, "the deliveries recorded as delivered")
        got = receiver.received()
        assert states() == expected  # nothing lost, nothing made up
        copies: dict[str, list[bytes]] = collections.defaultdict(list)
        for h, body in got:
            verify_signature(hook["secret"], h["Tensorant-Signature"], body, time.time())
            assert h["Idempotency-Key"] == h["Tensorant-Event-Id"] == json.loads(body)["id"]
            copies[h["Idempotency-Key"]].append(body)
        assert len(copies) == len(expected)  # one idempotency key per state change
        # The delivery in flight at the kill was sent again, the same event byte for byte; a
        # duplicate is only ever a copy with the same key.
        again = copies[in_flight[0][0]["Idempotency-Key"]]
        assert len(again) >= 2 and all(b == again[0] for b in again)
        assert all(len(set(bodies)) == 1 for bodies in copies.values())
        redone = [d for d in listed if d["event_id"] == in_flight[0][0]["Idempotency-Key"]]
        assert redone[0]["attempts"] >= 1 and redone[0]["status"] == "delivered"
    finally:
        receiver.close()
