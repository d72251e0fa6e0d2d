"""V1, V2 in the console: a member deploys a succeeded run (the real trainer's adapter of the
tiny model) from its page, tries it on Serve → Deployments (whose card then counts the
request and its tokens), and deletes it after confirming;
the sandbox then lists no endpoint. An auditor sees the deployment but neither Try it nor
Delete."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Locator, Page, expect

from entrypoints.settings import Settings
from runpod_sandbox import Sandbox
from tests.browser.conftest import Console, _serve, describe
from tests.e2e.conftest import Api, Org, connect, volume_spec
from tests.e2e.flows import draft, launch, run_config, upload_dataset, wait_state
from tests.e2e.test_real_training import _dataset

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
VOLUME = "nv7eu1ro4k"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, tiny_model: Path) -> Iterator[Api]:
    """The console's stack with the real trainer, the tiny model on the volume."""
    # The endpoints are looked at every 2 s (the Cleanup page's row of a billing endpoint).
    settings = Settings(
        data_dir=tmp_path_factory.mktemp("console-serving"), serving_endpoints_interval=2
    )
    with Sandbox(startup_seconds=0.1, trainer="real") as box:
        shutil.copytree(tiny_model, box.volume_path(VOLUME) / "models" / "tiny")
        server, container = _serve(box, settings)
        api = Api("console", server.base_url, container, box, settings)
        try:
            yield api
        finally:
            api.close()
            server.stop()


def _succeeded_run(stack: Api, org: Org) -> str:
    creds = stack.sandbox.credentials()
    connect(org, creds)
    assert org.owner.put("/v1/storage", json=volume_spec(creds)).status_code == 200
    project = org.member.post("/v1/projects", json={"name": "colours"}).json()["id"]
    dv = upload_dataset(org, project, "colours", data=_dataset(200))["id"]
    run_id = str(draft(org, run_config(project, dv, base_model="storage:models/tiny"))["id"])
    launch(org, run_id)
    wait_state(org, run_id, "succeeded", timeout=600)
    return run_id


def _cleanup_row(p: Page, kind: str, endpoint_id: str) -> Locator:
    """The Cleanup page's row of the endpoint, reloaded until the reconciler (which looks at
    endpoints every few seconds) has seen it."""
    p.goto("/cleanup")
    row = p.locator(f'tr[data-cleanup-kind="{kind}"]', has_text=endpoint_id)
    for _ in range(40):
        if row.count():
            break
        p.wait_for_timeout(500)
        p.reload()
    expect(row).to_be_visible()
    return row


def test_a_member_deploys_tries_and_deletes_a_deployment(
    console: Console, stack: Api, org: Org
) -> None:
    run_id = _succeeded_run(stack, org)
    p = console.sign_in(org.tokens["member"])
    p.goto(f"/runs/{run_id}")
    p.get_by_role("button", name="Deploy this adapter").click()
    p.wait_for_url(console.base_url + "/deployments")
    card = p.locator("section[data-deployment]")
    expect(card.locator("[data-state]")).to_have_text("ready")
    [endpoint] = stack.sandbox.model.serverless.live()
    expect(card).to_contain_text(endpoint.id)
    assert not console.axe(), describe(console.axe())

    card.get_by_label(f"Message to run {run_id[:8]}").fill("What colour is the sky?")
    # The first message is a cold start (a worker process imports torch and loads the model):
    # on a loaded machine that outlasts a click's default wait for the page to answer.
    card.get_by_role("button", name="Send").click(timeout=180_000)
    answer = p.get_by_role("status")
    expect(answer).to_contain_text("Adapter (temperature 0):", timeout=180_000)
    expect(answer).to_contain_text("What colour is the sky?")
    assert endpoint.requests == 1  # the worker answered it
    # The card counts what went through it, from the answer's own usage.
    usage = card.get_by_role("table", name=f"Chat usage of run {run_id[:8]}")
    expect(usage.locator("[data-requests]")).to_have_text("1")
    expect(usage.locator("[data-errors]")).to_have_text("0")
    completion = int(usage.locator("[data-completion-tokens]").inner_text())
    assert 1 <= completion <= 64, completion  # Try it asks for at most 64
    assert int(usage.locator("[data-prompt-tokens]").inner_text()) >= 1
    assert not console.axe(), describe(console.axe())

    # V3: Cleanup status shows the endpoint while its worker is up, at its price per hour.
    row = _cleanup_row(p, "serving_endpoint", endpoint.id)
    expect(row).to_contain_text("$0.684")  # one ADA_24 worker: $0.00019 a second
    expect(row.get_by_role("link", name=f"Deployments of endpoint {endpoint.id}")).to_have_count(1)
    assert not console.axe(), describe(console.axe())
    p.goto("/deployments")

    auditor = Console(console.context.browser, stack.base_url)  # type: ignore[arg-type]
    try:
        a = auditor.sign_in(org.tokens["auditor"])
        a.get_by_role("navigation").get_by_role("link", name="Serve → Deployments").click()
        expect(a.locator("section[data-deployment] [data-state]")).to_have_text("ready")
        expect(a.get_by_role("button", name="Send")).to_have_count(0)
        expect(a.get_by_role("link", name=f"Delete deployment of run {run_id[:8]}")).to_have_count(
            0
        )
    finally:
        auditor.close()

    p.get_by_role("link", name=f"Delete deployment of run {run_id[:8]}").click()
    dialog = p.get_by_role("dialog")
    expect(dialog).to_contain_text("Delete this deployment?")
    dialog.get_by_role("button", name="Confirm delete").click()
    p.wait_for_url(console.base_url + "/deployments")
    expect(p.get_by_text("Nothing deployed.")).to_be_visible()
    assert stack.sandbox.model.serverless.live() == []

    # V3: an endpoint with our naming made at RunPod with the key, kept by no deployment, is
    # an orphan on the Cleanup page, with what to do about it.
    runpod = httpx.Client(
        base_url=stack.sandbox.base_url,
        headers={"Authorization": f"Bearer {stack.sandbox.credentials()['api_key']}"},
    )
    made = runpod.post(
        "/v2/serverless",
        json={
            "name": f"tensorant-serve-{'0' * 20}",
            "image": "runpod/worker-v1-vllm:v2.25.0",
            "gpu": {"pools": ["ADA_24"], "count": 1},
        },
    )
    assert made.status_code == 201, made.text
    row = _cleanup_row(p, "orphan_endpoint", made.json()["id"])
    expect(row).to_contain_text("Delete it in RunPod's console")
    assert not console.axe(), describe(console.axe())
    assert runpod.delete(f"/v2/serverless/{made.json()['id']}").status_code == 204
