"""R20 in the console: an owner adds a webhook endpoint under Settings → Webhooks (its secret
shown once, and it verifies what the receiver gets), sees its recent deliveries and removes it;
other roles see no Webhooks page and a direct visit or post is refused."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from playwright.sync_api import expect

from domain.webhook import verify_signature
from entrypoints.settings import Settings
from runpod_sandbox import Sandbox
from tests.browser.conftest import Console, ConsoleHttp, _serve, describe
from tests.e2e.conftest import Api, Org, connect, volume_spec
from tests.e2e.flows import project_with_dataset, run_config, until

GOT: list[tuple[dict[str, str], bytes]] = []


class _Hook(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        GOT.append((dict(self.headers.items()), body))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def receiver() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, receiver: str) -> Iterator[Api]:
    """The console's stack with the loopback receiver allow-listed for the SSRF guard."""
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("console-webhooks"), webhook_allow_endpoints=[receiver]
    )
    with Sandbox(startup_seconds=0.1) as box:
        server, container = _serve(box, settings)
        api = Api("console", server.base_url, container, box, settings)
        try:
            yield api
        finally:
            api.close()
            server.stop()


def test_an_owner_adds_an_endpoint_sees_its_deliveries_and_removes_it(
    console: Console, stack: Api, org: Org, receiver: str
) -> None:
    creds = stack.sandbox.credentials()
    connect(org, creds)
    assert org.owner.put("/v1/storage", json=volume_spec(creds)).status_code == 200
    config = run_config(*project_with_dataset(org))
    p = console.sign_in(org.tokens["owner"])
    p.get_by_role("navigation").get_by_role("link", name="Settings → Webhooks").click()
    expect(p.get_by_role("heading", name="Webhooks", exact=True)).to_be_visible()

    form = p.locator("form", has=p.get_by_role("heading", name="Add an endpoint"))
    form.get_by_label("Endpoint URL (https)").fill("https://127.0.0.1:9/x")
    form.get_by_role("button", name="Add endpoint").click()
    expect(p.get_by_role("alert")).to_contain_text("unsafe-webhook-url")

    form.get_by_label("Endpoint URL (https)").fill(receiver)
    form.get_by_label("run.state_changed").check()
    form.get_by_role("button", name="Add endpoint").click()
    secret = p.get_by_label(f"Signing secret of {receiver}").input_value()
    assert secret.startswith("whsec_")
    critical = console.axe()
    assert not critical, describe(critical)
    [hook] = org.owner.get("/v1/webhooks").json()
    assert hook["events"] == ["run.state_changed"]

    run = org.member.post("/v1/runs", json=config).json()

    def arrived() -> dict[str, Any] | None:
        for headers, body in GOT:
            payload: dict[str, Any] = json.loads(body)
            if payload["data"]["run_id"] == run["id"]:
                verify_signature(secret, headers["Tensorant-Signature"], body, time.time())
                return payload
        return None

    payload = until(arrived, 20, "the draft's state change at the receiver")
    assert payload["data"]["state"] == "draft"
    until(
        lambda: org.owner.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["deliveries"],
        10,
        "the delivery recorded",
    )
    p.goto("/settings/webhooks")
    assert secret not in p.content()  # shown once: the page again has the list, not the secret
    row = p.locator(f'tr[data-delivery="{payload["id"]}"]')
    expect(row).to_contain_text("run.state_changed → draft")
    expect(row).to_contain_text("delivered")
    expect(row).to_contain_text("HTTP 204")
    console.shot("45-webhooks")

    p.get_by_role("button", name=f"Remove {receiver}").click()
    expect(p.locator("section[data-webhook]")).to_have_count(0)
    assert org.owner.get("/v1/webhooks").json() == []


def test_other_roles_see_no_webhooks_page_and_a_direct_post_is_refused(
    console: Console, stack: Api, org: Org, receiver: str
) -> None:
    p = console.sign_in(org.tokens["member"])
    nav = p.get_by_role("navigation")
    expect(nav.get_by_role("link", name="Settings → Webhooks")).to_have_count(0)
    forger = ConsoleHttp(stack.base_url, org.tokens["member"])
    try:
        assert forger.http.get("/settings/webhooks").status_code == 403
        r = forger.post("/settings/webhooks", {"url": receiver})
        assert r.status_code == 403, r.status_code
        assert org.owner.get("/v1/webhooks").json() == []
    finally:
        forger.close()
