"""Managed serving (V1, V2, V4) over HTTP against `tensorant serve --sandbox` with the real
trainer: two trials of the tiny model are trained and verified; the first (at a high learning
rate, so its greedy answer moves) is deployed and
answers chat completions through `/v1/deployments/{id}/chat/completions` at temperature 0 with
text that differs from the base model alone (the sandbox's worker applies the adapter with
peft), streamed too, its requests and tokens counted per deployment, and the organization's
rate limit refusing with 429 before anything reaches a worker; the second adapter of the same
base model joins the same endpoint; a key without Serverless rights is refused 422 and custom
S3 409; deleting both leaves the sandbox with no endpoint."""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from runpod_sandbox.seed import seeded_credentials
from tests.e2e.conftest import custom_spec, volume_spec
from tests.e2e.served import Served, serve
from tests.e2e.test_real_training import Org, _ok, _token_of_new_org, _until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]
ADA_24_PER_SECOND = Decimal("0.00019")  # RunPod's flex price of a 24 GB serverless worker
CENT = Decimal("0.01")
EXACT = Decimal("0.000001")  # a float's error on amounts of cents

ASK: dict[str, Any] = {
    "messages": [{"role": "user", "content": "What colour is the sky?"}],
    "temperature": 0,
    "max_tokens": 12,
}
# The organization's chat bucket: five requests an hour, so a test's few never refill it.
RATE_LIMIT, RATE_WINDOW_S = 5, 3600


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    # RunPod's hourly bill is read every 3 s and the endpoints every 2 s here (V3: the
    # endpoint's cost is checked, cleanup lists it); a cold start may take minutes on a loaded
    # machine.
    with serve(
        tmp_path_factory.mktemp("serving"),
        sandbox_trainer="real",
        serving_rate_limit=str(RATE_LIMIT),
        serving_rate_window_s=str(RATE_WINDOW_S),
        billing_reconcile_interval="3",
        serving_endpoints_interval="2",
        serving_cold_start_s="300",
    ) as srv:
        srv.wait_healthy(120)
        yield srv


def _sandbox(srv: Served) -> httpx.Client:
    creds = seeded_credentials(srv.sandbox_port)
    return httpx.Client(
        base_url=f"http://127.0.0.1:{srv.sandbox_port}",
        headers={"Authorization": f"Bearer {creds['api_key']}"},
        timeout=120,
    )


def _trained(org: Org, **changes: Any) -> str:
    run_id = org.launch(**changes)
    _losses, done = org.train(run_id)
    assert done["state"] == "succeeded", done
    return run_id


def _stream(org: Org, dep_id: str, body: dict[str, Any]) -> list[str]:
    with org.api.stream("POST", f"/v1/deployments/{dep_id}/chat/completions", json=body) as r:
        assert r.status_code == 200, r.read()
        return [line for line in r.iter_lines() if line.startswith("data: ")]


def _text(answer: dict[str, Any]) -> str:
    return str(answer["choices"][0]["message"]["content"])


def test_deploy_chat_share_and_delete(served: Served, tiny_model: Path) -> None:
    creds = seeded_credentials(served.sandbox_port)
    org = Org(served, _token_of_new_org(served, "Serving"), volume_spec(creds), tiny_model)
    sandbox = _sandbox(served)
    second = _trained(org)
    # The default learning rate needs about a hundred steps before the tiny model's greedy
    # answer changes (a trial's dozen move only its logits); the bound's highest needs a trial.
    first = _trained(org, learning_rate=1e-2)

    # A key without Serverless rights: refused with what to do, nothing deployed.
    _ok(sandbox.post("/_sandbox/faults", json={"serverless_forbidden": True}))
    refused = org.api.post("/v1/deployments", json={"run_id": first})
    assert refused.status_code == 422, refused.text
    assert refused.json()["type"].endswith("/key-lacks-serverless")
    assert "Serverless" in refused.json()["detail"]
    _ok(sandbox.post("/_sandbox/faults", json={}))
    assert sandbox.get("/v2/serverless").json() == []
    assert org.api.get("/v1/deployments").json() == []

    dep = _ok(org.api.post("/v1/deployments", json={"run_id": first}), 202)
    assert dep["state"] == "ready", dep
    endpoints = sandbox.get("/v2/serverless").json()
    assert [e["id"] for e in endpoints] == [dep["endpoint_id"]]
    assert endpoints[0]["name"] == dep["endpoint_name"]
    assert endpoints[0]["workers"]["min"] == 0  # costs nothing idle
    # The adapter is on the volume, in the serving directory, naming the served model.
    folder = f"serving/loras/{dep['adapter_name']}"
    config = json.loads(org.storage.get(f"{folder}/adapter_config.json"))
    assert config["base_model_name_or_path"] == dep["served_model"] == "/runpod-volume/models/tiny"
    assert org.storage.get(f"{folder}/adapter_model.safetensors")

    # The first request is a cold start (a worker process imports torch and loads the model):
    # on a loaded machine that outlasts the client's usual minute.
    tuned = _ok(
        org.api.post(f"/v1/deployments/{dep['id']}/chat/completions", json=ASK, timeout=300)
    )
    base = _ok(
        sandbox.post(
            f"/v2/{dep['endpoint_id']}/openai/v1/chat/completions",
            json={**ASK, "model": dep["served_model"]},
        )
    )
    print(f"tuned: {_text(tuned)!r}; base: {_text(base)!r}")
    assert _text(tuned) != _text(base)
    prompt, completion = tuned["usage"]["prompt_tokens"], tuned["usage"]["completion_tokens"]
    assert completion >= 1 and prompt >= 1
    usage = _ok(org.api.get(f"/v1/deployments/{dep['id']}"))["usage"]
    assert usage == {
        "requests": 1,
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "errors": 0,
        "cold_starts": 0,
    }

    # Streamed: the usage chunk we ask the worker for reaches the client only when it asks.
    lines = _stream(org, dep["id"], {**ASK, "stream": True})
    assert lines[-1] == "data: [DONE]"
    streamed = "".join(
        json.loads(line[6:])["choices"][0]["delta"].get("content") or "" for line in lines[:-1]
    )
    assert streamed == _text(tuned)
    asked = _stream(
        org, dep["id"], {**ASK, "stream": True, "stream_options": {"include_usage": True}}
    )
    last = json.loads(asked[-2][6:])
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == completion
    usage = _ok(org.api.get(f"/v1/deployments/{dep['id']}"))["usage"]
    assert (usage["requests"], usage["prompt_tokens"], usage["completion_tokens"]) == (
        3,
        3 * prompt,
        3 * completion,
    )

    # The second adapter of the same base model joins the endpoint.
    other = _ok(org.api.post("/v1/deployments", json={"run_id": second}), 202)
    assert other["state"] == "ready" and other["endpoint_id"] == dep["endpoint_id"], other
    assert len(sandbox.get("/v2/serverless").json()) == 1
    _ok(org.api.post(f"/v1/deployments/{other['id']}/chat/completions", json=ASK))
    listed = {d["id"]: d["usage"]["requests"] for d in org.api.get("/v1/deployments").json()}
    assert listed == {dep["id"]: 3, other["id"]: 1}  # counted per deployment
    # Cleanup lists the endpoint (once) while it bills: a worker is up (idle until its idle
    # timeout), at its pool's price per hour (ADA_24, $0.00019 a second for each worker).
    [item] = _until(lambda: _billing_items(org), 60, "the endpoint with workers up in cleanup")
    assert (item["kind"], item["endpoint_id"]) == ("serving_endpoint", dep["endpoint_id"]), item
    assert Decimal(item["price_per_hour"]) == ADA_24_PER_SECOND * 3600 * item["workers_up"]

    # The organization's rate limit: its fifth request passes, the sixth is 429 with
    # Retry-After and reaches no worker; once the window refilled a token, it passes again.
    _ok(org.api.post(f"/v1/deployments/{dep['id']}/chat/completions", json=ASK))
    health = f"/v2/{dep['endpoint_id']}/health"
    answered = _ok(sandbox.get(health))["jobs"]["completed"]
    for body in (ASK, {**ASK, "stream": True}):
        r = org.api.post(f"/v1/deployments/{dep['id']}/chat/completions", json=body)
        assert r.status_code == 429 and r.json()["type"].endswith("/chat-rate-limited"), r.text
        per_token = RATE_WINDOW_S // RATE_LIMIT
        assert per_token // 2 < int(r.headers["Retry-After"]) <= per_token, r.headers
    assert _ok(sandbox.get(health))["jobs"]["completed"] == answered
    assert _ok(org.api.get(f"/v1/deployments/{dep['id']}"))["usage"]["requests"] == 4

    # Idle for a week, RunPod cut the endpoint's maximum workers to 0. Two tokens later (the
    # window refills), the next request first raises them again (checked at most every ten
    # minutes), then goes on: here to the worker's own refusal, relayed and counted an error.
    endpoint = f"/v2/serverless/{dep['endpoint_id']}"
    _ok(sandbox.patch(endpoint, json={"workers": {"min": 0, "max": 0, "idleTimeout": 60}}))
    _ok(sandbox.post("/_sandbox/clock", json={"advance_seconds": 2 * per_token}))
    too_long = {**ASK, "max_tokens": 1000}  # ours allows it; the sandbox's worker takes 512
    r = org.api.post(f"/v1/deployments/{other['id']}/chat/completions", json=too_long)
    assert r.status_code == 400 and "max_tokens" in r.text, r.text
    assert _ok(sandbox.get(endpoint))["workers"]["max"] == 2
    usage = _ok(org.api.get(f"/v1/deployments/{other['id']}"))["usage"]
    assert (usage["requests"], usage["errors"]) == (2, 1)

    _money_to_the_cent(org, sandbox, dep)

    # Deleting one keeps the endpoint for the other; deleting both deletes it.
    gone = _ok(org.api.delete(f"/v1/deployments/{dep['id']}"), 202)
    assert gone["state"] == "deleted", gone
    assert len(sandbox.get("/v2/serverless").json()) == 1
    after = org.api.post(f"/v1/deployments/{dep['id']}/chat/completions", json=ASK)
    assert after.status_code == 409 and after.json()["type"].endswith("/deployment-not-ready")
    gone = _ok(org.api.delete(f"/v1/deployments/{other['id']}"), 202)
    assert gone["state"] == "deleted", gone
    assert sandbox.get("/v2/serverless").json() == []
    assert _ok(org.api.get("/v1/cleanup"))["items"] == []
    with pytest.raises(Exception):  # noqa: B017, PT011 - boto3's error for a missing key
        org.storage.get(f"{folder}/adapter_config.json")
    _custom_s3_cannot_serve(served, sandbox)


def _billing_items(org: Org) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = _ok(org.api.get("/v1/cleanup"))["items"]
    return items if items and all(i["workers_up"] for i in items) else []


def _money_to_the_cent(org: Org, sandbox: httpx.Client, dep: dict[str, Any]) -> None:
    """V3: the hour of the chats ends and settles on the sandbox's clock; the billing
    reconciler reads RunPod's hourly serverless bill; the deployment's cost, the cost report
    and the FOCUS export then equal the sandbox ledger's charges for the endpoint to the
    cent. The idle workers scaled to zero meanwhile: cleanup no longer lists the endpoint."""
    endpoint_id = dep["endpoint_id"]
    ledger = _ok(sandbox.get("/_sandbox/ledger"))
    [charged] = [e for e in ledger["serverless"] if e["endpoint_id"] == endpoint_id]
    billed = Decimal(charged["total"]["exact"])
    assert billed > 0, ledger  # the workers' answering seconds
    start = datetime.fromisoformat(ledger["from"].replace("Z", "+00:00"))
    now = datetime.fromisoformat(_ok(sandbox.get("/_sandbox/clock"))["now"].replace("Z", "+00:00"))
    settled = now.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1, minutes=11)
    advance = (settled - now).total_seconds()
    _ok(sandbox.post("/_sandbox/clock", json={"advance_seconds": advance}))
    cents = billed.quantize(CENT, rounding=ROUND_HALF_UP)

    def cost() -> Decimal | None:
        shown = Decimal(_ok(org.api.get(f"/v1/deployments/{dep['id']}"))["endpoint_cost"])
        return shown if shown > 0 else None

    shown = _until(cost, 60, "the deployment's endpoint cost (RunPod's bill read)")
    # To the cent, and closer: RunPod's hourly records carry the ledger's amounts (as floats).
    assert shown.quantize(CENT, rounding=ROUND_HALF_UP) == cents, (shown, billed)
    assert abs(shown - billed) < EXACT, (shown, billed)
    # From the hour the sandbox started in: its charges are RunPod's hours, whole.
    hour = start.replace(minute=0, second=0, microsecond=0)
    window = {"from": hour.isoformat(), "to": settled.isoformat()}
    report = _ok(org.api.get("/v1/billing/costs", params={**window, "group_by": "resource"}))
    lines = {line["key"]: line for line in report["lines"]}
    assert Decimal(lines[f"serverless:{endpoint_id}"]["billed_cost"]) == cents, report
    focus = org.api.get("/v1/billing/export", params={**window, "format": "focus-csv"})
    assert focus.status_code == 200, focus.text
    rows = [r for r in csv.DictReader(io.StringIO(focus.text)) if r["ResourceId"] == endpoint_id]
    assert {(r["ServiceName"], r["ResourceType"]) for r in rows} == {
        ("RunPod Serverless", "Serverless Endpoint")
    }, rows
    total = sum((Decimal(r["BilledCost"]) for r in rows), Decimal(0))
    assert total.quantize(CENT, rounding=ROUND_HALF_UP) == cents, rows
    assert abs(total - billed) < EXACT, (total, billed)
    # An hour on, the idle workers are gone (minimum 0): the endpoint bills nothing, and
    # cleanup does not list it although its deployments keep it.
    _until(
        lambda: _ok(org.api.get("/v1/cleanup"))["items"] == [], 60, "cleanup without the endpoint"
    )


def _custom_s3_cannot_serve(served: Served, sandbox: httpx.Client) -> None:
    """An organization on custom S3 is refused at once: RunPod's workers mount only a network
    volume (one test with the rest: a module of its own would start another server)."""
    creds = seeded_credentials(served.sandbox_port)
    token = _token_of_new_org(served, "ServingS3")
    api = httpx.Client(
        base_url=served.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=60
    )
    _ok(api.post("/v1/connections/runpod", json={"api_key": creds["api_key"]}), 201)
    _ok(api.put("/v1/storage", json=custom_spec(creds)))
    started = time.monotonic()
    refused = api.post("/v1/deployments", json={"run_id": "0" * 32})
    assert refused.status_code == 409, refused.text
    assert refused.json()["type"].endswith("/serving-needs-network-volume")
    assert time.monotonic() - started < 30
    assert sandbox.get("/v2/serverless").json() == []
