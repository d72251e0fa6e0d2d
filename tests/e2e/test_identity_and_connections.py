"""Identity (A1, A3, S7) and the compute connection (C1-C5) over HTTP."""

from __future__ import annotations

from typing import Any

import pytest

from application.organizations import hash_token
from tests.e2e.conftest import Api, Org, bind_volume, connect, custom_spec, problem
from tests.e2e.flows import draft, launch, ready, wait_state


def test_me_shows_the_caller_for_every_role(org: Org) -> None:
    for role, client in org.clients.items():
        body = client.get("/v1/me").json()
        assert body["role"] == role
        assert body["organization_id"] == org.id
        assert set(body) >= {"user_id", "email", "organization_id", "role"}


def test_requests_without_a_valid_token_are_refused_with_401(api: Api) -> None:
    problem(api.client().get("/v1/me"), 401, "unauthenticated")
    problem(api.client("tnt_not-a-token").get("/v1/connections"), 401, "unauthenticated")


def test_tokens_are_stored_only_as_hashes(api: Api, org: Org) -> None:
    """A1: the members view is keyed by the token's hash; the token itself is nowhere."""
    doc = api.container.views.get("members", "_", hash_token(org.tokens["owner"]))
    assert doc is not None
    assert org.tokens["owner"] not in str(doc)


def test_organization_shows_mode_and_no_capabilities_before_connections(org: Org) -> None:
    body = org.member.get("/v1/organization").json()
    assert body["id"] == org.id
    assert body["mode"] == "own"
    assert body["capabilities"] == {"training": False, "managed_serving": False}


def test_capabilities_follow_the_connections_S7(api: Api, creds: dict[str, Any]) -> None:
    vol = api.new_org()
    connect(vol, creds)
    assert vol.owner.get("/v1/organization").json()["capabilities"] == {
        "training": False,
        "managed_serving": False,
    }
    bind_volume(vol, creds)
    assert vol.owner.get("/v1/organization").json()["capabilities"] == {
        "training": True,
        "managed_serving": True,
    }
    s3 = api.new_org()
    connect(s3, creds)
    assert s3.owner.put("/v1/storage", json=custom_spec(creds)).status_code == 200
    assert s3.owner.get("/v1/organization").json()["capabilities"] == {
        "training": True,
        "managed_serving": False,
    }


def test_connections_start_not_connected(org: Org) -> None:
    body = org.finance.get("/v1/connections").json()
    assert body["compute"]["status"] == "not_connected"
    assert body["storage"]["status"] == "not_connected"
    assert body["storage"]["locked"] is False


def test_saving_a_key_checks_it_and_shows_the_account_C1(org: Org, creds: dict[str, Any]) -> None:
    card = connect(org, creds)
    assert card["status"] == "connected"
    assert card["account_id"] == creds["account_id"]
    assert card["key_fingerprint"] == "…" + creds["api_key"][-4:]
    assert card["write_permission"] == "unproven"  # C3
    assert card["balance"] is not None
    assert card["spend_per_hour"] is not None
    assert card["connected_at"].endswith("Z")
    assert org.auditor.get("/v1/connections").json()["compute"] == card


def test_an_invalid_key_is_refused_and_nothing_is_stored_C1(api: Api, org: Org) -> None:
    r = org.owner.post("/v1/connections/runpod", json={"api_key": "rpa_" + "Z" * 40})
    problem(r, 422, "invalid-key")
    assert org.owner.get("/v1/connections").json()["compute"]["status"] == "not_connected"
    # The failed attempt is recorded for auditors, without key material.
    conn = api.container.services.log.connection(org.id)
    assert conn.status == "not_connected"
    events = list(api.container.services.log.repository.event_store.get(conn.id))
    failed = [e for e in events if type(e).__name__ == "ConnectionCheckFailed"]
    assert failed
    assert "Z" * 20 not in str(vars(failed[-1]))


def test_a_read_only_key_is_refused_or_left_unproven_C1_C3(org: Org, creds: dict[str, Any]) -> None:
    """The account check cannot prove write permission: a read-only key is refused when the
    provider shows it, and otherwise the card says `unproven` (never `proven`)."""
    r = org.owner.post("/v1/connections/runpod", json={"api_key": creds["read_only_api_key"]})
    if r.status_code == 422:
        problem(r, 422, "read-only-key")
    else:
        assert r.status_code == 201
        assert r.json()["write_permission"] == "unproven"


def test_connecting_twice_is_a_conflict(org: Org, creds: dict[str, Any]) -> None:
    connect(org, creds)
    r = org.owner.post("/v1/connections/runpod", json={"api_key": creds["api_key"]})
    problem(r, 409, "already-connected")


def test_provided_organizations_cannot_save_connections_A3(api: Api, creds: dict[str, Any]) -> None:
    o = api.new_org(mode="provided")
    assert o.owner.get("/v1/organization").json()["mode"] == "provided"
    body = problem(
        o.owner.post("/v1/connections/runpod", json={"api_key": creds["api_key"]}),
        409,
        "provided-by-tensorant",
    )
    assert "administrator" in body["detail"]
    problem(o.owner.put("/v1/storage", json=custom_spec(creds)), 409, "provided-by-tensorant")


def test_an_s3_key_in_the_api_key_field_is_named_C5(org: Org, creds: dict[str, Any]) -> None:
    r = org.owner.post("/v1/connections/runpod", json={"api_key": creds["s3_secret_access_key"]})
    body = problem(r, 422, "wrong-kind-of-key")
    assert "S3" in body["detail"]
    assert creds["s3_secret_access_key"] not in r.text


def test_runpod_unreachable_is_503(api: Api, org: Org, creds: dict[str, Any]) -> None:
    api.sandbox.set_faults(error_rate=1.0)
    try:
        r = org.owner.post("/v1/connections/runpod", json={"api_key": creds["api_key"]})
    finally:
        api.sandbox.set_faults({})
    problem(r, 503, "runpod-unreachable")
    assert org.owner.get("/v1/connections").json()["compute"]["status"] == "not_connected"


def test_rotating_the_key_checks_the_new_one_first_C2(org: Org, creds: dict[str, Any]) -> None:
    problem(
        org.owner.post("/v1/connections/runpod/rotate", json={"api_key": creds["api_key"]}),
        409,
        "not-connected",
    )
    before = connect(org, creds)
    r = org.owner.post("/v1/connections/runpod/rotate", json={"api_key": "rpa_" + "Q" * 40})
    problem(r, 422, "invalid-key")
    assert org.owner.get("/v1/connections").json()["compute"] == before
    r = org.owner.post("/v1/connections/runpod/rotate", json={"api_key": creds["api_key"]})
    assert r.status_code == 200, r.text
    card = r.json()
    assert card["status"] == "connected"
    assert card["rotated_at"] is not None
    assert card["key_fingerprint"] == "…" + creds["api_key"][-4:]
    assert org.owner.get("/v1/connections").json()["compute"] == card


def test_removing_the_connection_C4(api: Api, creds: dict[str, Any]) -> None:
    """C4's own input: a real Pod of the organization's run, live at RunPod, keeps the key; once
    the run is cancelled and its Pod confirmed terminated, the key can go."""
    problem(api.new_org().owner.delete("/v1/connections/runpod"), 409, "not-connected")
    org, config = ready(api, creds)
    run = draft(org, config)
    api.sandbox.set_scenario("hang", 1)  # the trainer never finishes: the Pod stays running
    launch(org, run["id"])
    assert wait_state(org, run["id"], "running")["pod_id"]
    body = problem(org.owner.delete("/v1/connections/runpod"), 409, "pods-depend-on-key")
    assert "cleanup" in body["detail"]
    assert org.owner.get("/v1/connections").json()["compute"]["status"] == "connected"
    assert org.member.post(f"/v1/runs/{run['id']}/cancel").status_code == 202
    done = wait_state(org, run["id"], "cancelled")
    assert done["cleanup"]["pod_status"] == "terminated"
    r = org.owner.delete("/v1/connections/runpod")
    assert r.status_code == 204, r.text
    assert r.content == b""
    assert org.owner.get("/v1/connections").json()["compute"]["status"] == "not_connected"


@pytest.mark.parametrize("role", ["member", "auditor", "finance"])
def test_only_owners_save_connections_A2(org: Org, creds: dict[str, Any], role: str) -> None:
    client = org.clients[role]
    problem(
        client.post("/v1/connections/runpod", json={"api_key": creds["api_key"]}), 403, "forbidden"
    )
    problem(
        client.post("/v1/connections/runpod/rotate", json={"api_key": creds["api_key"]}),
        403,
        "forbidden",
    )
    problem(client.delete("/v1/connections/runpod"), 403, "forbidden")


def test_validation_errors_are_problems_without_the_input(org: Org) -> None:
    secret = "rpa_" + "V" * 40
    r = org.owner.post("/v1/connections/runpod", json={"api_key": [secret]})
    body = problem(r, 422, "validation-error")
    assert body["errors"]
    assert secret not in r.text


def test_unknown_paths_are_problems(api: Api) -> None:
    problem(api.client().get("/v1/nothing-here"), 404, "not-found")


def test_operations_endpoints(api: Api) -> None:
    c = api.client()
    assert c.get("/healthz").json()["status"] == "ok"
    assert c.get("/readyz").json()["status"] == "ready"
    metrics = c.get("/metrics")
    assert "tensorant_http_requests_total" in metrics.text
    assert c.get("/docs").status_code == 200
    assert "/v1/connections/runpod" in c.get("/openapi.json").json()["paths"]
