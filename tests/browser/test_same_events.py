"""Acceptance 3: every console action leaves the same events as the equivalent API call — two
organizations walk the same steps, one through the HTTP API, one through the console's forms."""

from __future__ import annotations

import re
from typing import Any

from tests.browser.conftest import ConsoleHttp
from tests.builders import CHATS
from tests.e2e.conftest import Api, Org, volume_spec

A100 = "NVIDIA A100 80GB PCIe"
DATASET = {"name": "support-chats", "version": "1"}
FILE = {"file": ("chats.jsonl", CHATS, "application/jsonl")}
RUN = {
    "kind": "trial",
    "base_model": "Qwen/Qwen2.5-7B-Instruct",
    "gpu_type_id": A100,
    "gpu_count": "1",
    "price_limit_per_hour": "2.00",
    "max_runtime_minutes": "30",
}
ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# Ids and times differ by nature; balance and spend are the shared sandbox account's, moved by
# other tests' Pods.
VOLATILE: tuple[str, ...] = ("id", "at", "time", "timestamp", "actor", "org_id", "position")
VOLATILE += ("hash", "balance", "spend_per_hour")


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _strip(v)
            for k, v in value.items()
            if k not in VOLATILE and not k.endswith(("_id", "_at"))
        }
    if isinstance(value, list):
        return [_strip(v) for v in value]
    if isinstance(value, str):
        return ID.sub("<id>", value)
    return value


def user_events(org: Org) -> list[tuple[str, Any]]:
    """The events users' commands recorded (the worker's own are timing-dependent)."""
    body = org.auditor.get("/v1/audit/events", params={"limit": 1000}).json()
    return [
        (e["type"], _strip(e["data"]))
        for e in body["events"]
        if str(e["actor"]).startswith("user:")
    ]


def _ok(r: Any, status: int) -> Any:
    assert r.status_code == status, r.text
    return r.json() if r.content else None


def api_run() -> dict[str, Any]:
    """RUN as the API's JSON body carries it (counts are integers)."""
    counts = ("gpu_count", "max_runtime_minutes")
    return {k: int(v) if k in counts else v for k, v in RUN.items()}


def price_of(org: Org) -> str:
    gpus = org.owner.get("/v1/gpus", params={"datacenter_id": "EU-RO-1"}).json()
    return str(next(g["price_per_hour"] for g in gpus if g["id"] == A100))


def via_api(org: Org, creds: dict[str, Any]) -> None:
    o = org.owner
    _ok(o.post("/v1/connections/runpod", json={"api_key": "rpa_" + "X" * 40}), 422)
    _ok(o.post("/v1/connections/runpod", json={"api_key": creds["api_key"]}), 201)
    _ok(o.put("/v1/storage", json=volume_spec(creds)), 200)
    project = _ok(o.post("/v1/projects", json={"name": "support-bot"}), 201)
    dv = _ok(o.post(f"/v1/projects/{project['id']}/datasets", data=DATASET, files=FILE), 201)
    config = {**api_run(), "project_id": project["id"], "dataset_version_id": dv["id"]}
    _ok(o.post("/v1/runs", json={**config, "gpu_type_id": "Tesla T4"}), 422)
    discard = _ok(o.post("/v1/runs", json=config), 201)
    _ok(o.delete(f"/v1/runs/{discard['id']}"), 204)
    run = _ok(o.post("/v1/runs", json=config), 201)
    price = price_of(org)
    body = {"confirm": True, "accepted_price_per_hour": price}
    _ok(o.post(f"/v1/runs/{run['id']}/launch", json=body), 202)
    _ok(o.post(f"/v1/runs/{run['id']}/cancel"), 202)


def via_console(c: ConsoleHttp, org: Org, creds: dict[str, Any]) -> None:
    def post(path: str, data: dict[str, str]) -> Any:
        return c.post(path, data)

    assert post("/settings/connections/runpod", {"api_key": "rpa_" + "X" * 40}).status_code == 422
    assert post("/settings/connections/runpod", {"api_key": creds["api_key"]}).status_code == 303
    spec = volume_spec(creds)
    r = post(
        "/settings/connections/storage",
        {
            "kind": "runpod_volume",
            "volume": f"{spec['volume_id']}|{spec['datacenter_id']}",
            "access_key_id": spec["access_key_id"],
            "secret_access_key": spec["secret_access_key"],
        },
    )
    assert r.status_code == 303, r.text
    r = post("/projects", {"name": "support-bot"})
    assert r.status_code == 303, r.text
    project_id = r.headers["location"].rsplit("/", 1)[1]
    r = c.post(f"/projects/{project_id}/datasets", DATASET, files=FILE)
    assert r.status_code == 303, r.text
    dv_id = org.owner.get(f"/v1/projects/{project_id}/datasets").json()[0]["id"]
    form = {**RUN, "dataset": f"{project_id}/{dv_id}", "baseline": ""}
    assert post("/runs", {**form, "gpu_type_id": "Tesla T4"}).status_code == 422
    r = post("/runs", form)
    assert r.status_code == 303, r.text
    discard = r.headers["location"].rsplit("/", 1)[1]
    assert post(f"/runs/{discard}/discard", {}).status_code == 303
    r = post("/runs", form)
    run_id = r.headers["location"].rsplit("/", 1)[1]
    body = {"confirm": "true", "accepted_price_per_hour": price_of(org)}
    assert post(f"/runs/{run_id}/launch", body).status_code == 303
    assert post(f"/runs/{run_id}/cancel", {"confirmed": "yes"}).status_code == 303


def test_console_actions_leave_the_same_events_as_the_api(
    stack: Api, creds: dict[str, Any]
) -> None:
    api_org, console_org = stack.new_org(), stack.new_org()
    via_api(api_org, creds)
    c = ConsoleHttp(stack.base_url, console_org.tokens["owner"])
    try:
        via_console(c, console_org, creds)
    finally:
        c.close()
    stack.container.catch_up()  # the audit view has applied every event recorded so far
    expected, got = user_events(api_org), user_events(console_org)
    assert [t for t, _ in got] == [t for t, _ in expected]
    assert len(expected) >= 10, expected
    assert got == expected
