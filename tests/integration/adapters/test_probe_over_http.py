"""C1, C3 over HTTP: connecting a key whose write probe RunPod answers
"not found", "something went wrong" or an unknown text connects it with write permission
unproven, and the answer is in the connection's event for auditors; "Unauthorized" (GraphQL) or
403 (REST v2) refuses it as read-only. The real API and adapters, against a scripted RunPod."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.runpod import make_compute
from api.app import create_app
from entrypoints.bootstrap import build
from entrypoints.server import ServerThread
from entrypoints.settings import Settings
from tests.integration.adapters.runpod_stub import (
    KEY,
    Answer,
    StubRunPod,
    data,
    gql_error,
    problem,
)

MYSELF = {"myself": {"id": "user_1", "clientBalance": 10, "currentSpendPerHr": 0}}
PROBE = {"graphql": "podStop", "rest": "POST /v2/pods/tensorant-permission-probe/action"}


@pytest.fixture
def owner(
    request: pytest.FixtureRequest, stub: StubRunPod, tmp_path: Path
) -> Iterator[tuple[httpx.Client, httpx.Client, str]]:
    api: str = request.param
    stub.on("query account", data(MYSELF))
    stub.on("GET /v2/pods ", Answer(200, {"pods": []}))
    compute = make_compute(
        api, stub.base_url, sleep=lambda _s: None, jitter=lambda: 0.0, timeout_s=2
    )
    container = build(Settings(data_dir=tmp_path, runpod_api=api), compute=compute)
    orgs = container.services.organizations
    org_id = orgs.create("Probe org")
    token = orgs.add_member(org_id, "owner@example.com", "owner").token
    auditor = orgs.add_member(org_id, "audit@example.com", "auditor").token
    container.catch_up()
    with ServerThread(create_app(lambda: container)) as server:
        own = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {token}"})
        aud = httpx.Client(base_url=server.base_url, headers={"Authorization": f"Bearer {auditor}"})
        try:
            yield own, aud, api
        finally:
            own.close()
            aud.close()


def _saved_events(auditor: httpx.Client) -> list[dict[str, Any]]:
    r = auditor.get("/v1/audit/events", params={"limit": 500})
    assert r.status_code == 200, r.text
    return [e for e in r.json()["events"] if e["type"].endswith("ConnectionSaved")]


UNPROVEN = {
    "not found": {"graphql": gql_error("Pod not found."), "rest": problem(404, "pod not found")},
    "something went wrong": {
        "graphql": gql_error("Something went wrong. Please try again later."),
        "rest": problem(500, "Something went wrong."),
    },
    "unknown text": {
        "graphql": gql_error("Zorblax quota of this key is spent"),
        "rest": problem(400, "Zorblax quota of this key is spent"),
    },
}


@pytest.mark.parametrize("owner", ["graphql", "rest"], indirect=True)
@pytest.mark.parametrize("answer", list(UNPROVEN))
def test_probe_answers_other_than_unauthorized_connect_the_key_unproven(
    owner: tuple[httpx.Client, httpx.Client, str], stub: StubRunPod, answer: str
) -> None:
    client, auditor, api = owner
    stub.on(PROBE[api], UNPROVEN[answer][api])
    r = client.post("/v1/connections/runpod", json={"api_key": KEY})
    assert r.status_code == 201, r.text
    card = client.get("/v1/connections").json()["compute"]
    assert card["status"] == "connected", card
    assert card["write_permission"] == "unproven", card
    (saved,) = _saved_events(auditor)
    recorded = saved["data"]["probe_answer"]
    assert recorded.startswith(f"{api}: ")
    word = "Zorblax" if answer == "unknown text" else ""
    assert word in recorded
    if answer == "something went wrong":
        assert "no answer after" in recorded
    assert KEY not in str(saved) and KEY[-12:] not in str(saved)


@pytest.mark.parametrize("owner", ["graphql", "rest"], indirect=True)
def test_unauthorized_or_forbidden_probe_answer_refuses_the_key_as_read_only(
    owner: tuple[httpx.Client, httpx.Client, str], stub: StubRunPod
) -> None:
    client, auditor, api = owner
    refusal = gql_error("Unauthorized") if api == "graphql" else problem(403, "access denied")
    stub.on(PROBE[api], refusal)
    r = client.post("/v1/connections/runpod", json={"api_key": KEY})
    assert r.status_code == 422, r.text
    assert r.json()["type"].endswith("/read-only-key")
    card = client.get("/v1/connections").json()["compute"]
    assert card["status"] != "connected", card
    assert _saved_events(auditor) == []
