"""Owners manage members; a removed member's or a replaced token is
refused on the next request, on every API process (acceptance 3)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from domain.access import ROLES
from entrypoints.server import ServerThread, serve_with_sandbox
from entrypoints.settings import Settings
from runpod_sandbox import Sandbox
from tests.conftest import fresh_queue, require_service
from tests.e2e.conftest import Api, Org, _drop, _pg_schema, problem

AMQP = "amqp://guest:guest@127.0.0.1:5672/%2F"


def _user_id(client: httpx.Client) -> str:
    r = client.get("/v1/me")
    assert r.status_code == 200, r.text
    return str(r.json()["user_id"])


def _audit(org: Org, type_: str) -> list[dict[str, Any]]:
    r = org.auditor.get("/v1/audit/events", params={"type": type_, "limit": 1000})
    assert r.status_code == 200, r.text
    events: list[dict[str, Any]] = r.json()["events"]
    return events


def test_an_owner_invites_lists_changes_and_removes_members(api: Api, org: Org) -> None:
    listed = org.owner.get("/v1/members")
    assert listed.status_code == 200, listed.text
    assert sorted(m["role"] for m in listed.json()) == sorted(ROLES)
    assert all(set(m) >= {"user_id", "email", "role", "created_at"} for m in listed.json())
    assert "hash" not in listed.text and "tnt_" not in listed.text

    made = org.owner.post(
        "/v1/members", json={"email": "new@example.com", "role": "member", "expires_in_days": 30}
    )
    assert made.status_code == 201, made.text
    body = made.json()
    assert body["token"].startswith("tnt_") and body["token_expires_at"]
    new = api.client(body["token"])
    assert new.get("/v1/me").json()["role"] == "member"
    assert new.post("/v1/projects", json={"name": "p"}).status_code != 403  # 409: no storage yet
    assert all("token" not in m for m in org.owner.get("/v1/members").json())

    # Roles: effective on the very next request.
    r = org.owner.patch(f"/v1/members/{body['user_id']}", json={"role": "auditor"})
    assert r.status_code == 200 and r.json()["role"] == "auditor", r.text
    problem(new.post("/v1/projects", json={"name": "q"}), 403, "forbidden")
    assert new.get("/v1/me").json()["role"] == "auditor"

    # Removal: the token is refused at once.
    r = org.owner.delete(f"/v1/members/{body['user_id']}")
    assert r.status_code == 204, r.text
    problem(new.get("/v1/me"), 401, "unauthenticated")
    problem(org.owner.delete(f"/v1/members/{body['user_id']}"), 404, "not-found")
    assert body["user_id"] not in {m["user_id"] for m in org.owner.get("/v1/members").json()}

    # Auditors see who removed whom, and never a token hash.
    removed = _audit(org, "MemberRemoved")
    assert [(e["actor"], e["data"]["user_id"], e["data"]["email"]) for e in removed] == [
        (f"user:{_user_id(org.owner)}", body["user_id"], "new@example.com")
    ]
    everything = org.auditor.get("/v1/audit/events", params={"limit": 1000}).text
    assert "token_hash" not in everything
    state = org.auditor.get(f"/v1/audit/organization/{org.id}")
    assert state.status_code == 200, state.text
    assert "token_hash" not in state.text and "@example.com" in state.text


def test_only_owners_manage_members_and_the_last_owner_stays(api: Api, org: Org) -> None:
    for role in ("member", "auditor", "finance"):
        client = org.clients[role]
        problem(client.get("/v1/members"), 403, "forbidden")
        problem(
            client.post("/v1/members", json={"email": "x@example.com", "role": "owner"}),
            403,
            "forbidden",
        )
        problem(
            client.patch(f"/v1/members/{_user_id(client)}", json={"role": "owner"}),
            403,
            "forbidden",
        )
        problem(client.delete(f"/v1/members/{_user_id(org.owner)}"), 403, "forbidden")
    owner = _user_id(org.owner)
    problem(org.owner.patch(f"/v1/members/{owner}", json={"role": "member"}), 409, "last-owner")
    problem(org.owner.delete(f"/v1/members/{owner}"), 409, "last-owner")
    problem(
        org.owner.post("/v1/members", json={"email": "x@example.com", "role": "admin"}),
        422,
        "validation-error",
    )
    problem(
        org.owner.post(
            "/v1/members", json={"email": "x@example.com", "role": "member", "expires_in_days": "3"}
        ),
        422,
        "validation-error",
    )
    email = org.owner.get("/v1/me").json()["email"]
    problem(
        org.owner.post("/v1/members", json={"email": email, "role": "member"}), 409, "member-exists"
    )
    # Another organization's member is not found, never changed.
    other = api.new_org("Other")
    problem(org.owner.delete(f"/v1/members/{_user_id(other.member)}"), 404, "not-found")
    problem(
        org.owner.patch(f"/v1/members/{_user_id(other.member)}", json={"role": "owner"}),
        404,
        "not-found",
    )
    assert other.member.get("/v1/me").status_code == 200


def test_a_member_rotates_their_own_token(api: Api, org: Org) -> None:
    old = org.tokens["finance"]
    r = org.finance.post("/v1/me/token/rotate")
    assert r.status_code == 200, r.text
    new = r.json()["token"]
    assert new != old and r.json()["token_expires_at"] is None
    problem(org.finance.get("/v1/me"), 401, "unauthenticated")
    assert api.client(new).get("/v1/me").json()["role"] == "finance"
    rotated = _audit(org, "MemberTokenRotated")
    assert len(rotated) == 1 and "token_hash" not in str(rotated)


# The API's reads (`read_as`) on a token it has seen go out with the token's check (one round
# trip on PostgreSQL): what they read is answered only once that check names the same member.
READS = ("/v1/connections", "/v1/runs", "/v1/cleanup")


def test_a_read_on_a_token_seen_before_is_refused_once_the_member_is_removed(
    api: Api, org: Org
) -> None:
    made = org.owner.post("/v1/members", json={"email": "seen@example.com", "role": "member"})
    assert made.status_code == 201, made.text
    seen = api.client(made.json()["token"])
    for path in (*READS, *READS):  # twice: the second time, each read is made as a guess
        assert seen.get(path).status_code == 200, path
    assert org.owner.delete(f"/v1/members/{made.json()['user_id']}").status_code == 204
    for path in (*READS, "/v1/runs/00000000-0000-0000-0000-000000000000"):
        problem(seen.get(path), 401, "unauthenticated")  # never the read's own answer (404)


def test_a_read_on_a_rotated_token_is_refused_and_the_new_token_reads(api: Api, org: Org) -> None:
    for path in READS:
        assert org.finance.get(path).status_code == 200, path
    r = org.finance.post("/v1/me/token/rotate")
    assert r.status_code == 200, r.text
    for path in READS:
        problem(org.finance.get(path), 401, "unauthenticated")
    fresh = api.client(r.json()["token"])
    for path in (*READS, *READS):
        assert fresh.get(path).status_code == 200, path


def test_an_expired_token_is_refused(api: Api, org: Org) -> None:
    made = org.owner.post(
        "/v1/members", json={"email": "brief@example.com", "role": "member", "expires_in_days": 1}
    ).json()
    client = api.client(made["token"])
    assert client.get("/v1/me").status_code == 200
    clock = api.container.clock
    real_now = clock.now
    clock.now = lambda: real_now() + timedelta(days=1, seconds=1)  # type: ignore[method-assign]
    try:
        problem(client.get("/v1/me"), 401, "unauthenticated")
        assert org.owner.get("/v1/me").status_code == 200  # no expiry: still works
    finally:
        del clock.now


# ---------------------------------------------------------------- acceptance 3: two processes
@pytest.fixture
def two_processes(
    sandbox: Sandbox, postgres_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Api, Api]]:
    """Two API servers, each with its own container, on one PostgreSQL schema and RabbitMQ."""
    require_service("RabbitMQ", "127.0.0.1", 5672)
    schema = _pg_schema(postgres_url)
    data_dir: Path = tmp_path_factory.mktemp("members-pg")
    queues = ExitStack()
    settings = Settings(
        queue_name=queues.enter_context(fresh_queue(AMQP)),
        data_dir=data_dir,
        database_url=f"{postgres_url}?schema={schema}",
        broker_url=AMQP,
        projection_poll_interval=0.2,
    )
    servers: list[ServerThread] = []
    apis: list[Api] = []
    try:
        for reactions in ({"worker": True, "relay": True}, None):
            server, container = serve_with_sandbox(settings, sandbox, reactions=reactions)
            servers.append(server)
            apis.append(Api("postgres-rabbitmq", server.base_url, container, sandbox, settings))
        yield apis[0], apis[1]
    finally:
        for a in apis:
            a.close()
        for s in servers:
            s.stop()
        _drop(postgres_url, schema)
        queues.close()


@pytest.mark.postgres
def test_removed_and_rotated_tokens_are_refused_on_every_process(
    two_processes: tuple[Api, Api],
) -> None:
    a, b = two_processes
    org = a.new_org()
    on_b = {role: b.client(token) for role, token in org.tokens.items()}
    assert on_b["member"].get("/v1/me").status_code == 200  # warm: B has resolved it before
    member_id = _user_id(on_b["member"])

    assert org.owner.delete(f"/v1/members/{member_id}").status_code == 204  # on A
    problem(on_b["member"].get("/v1/me"), 401, "unauthenticated")  # on B, the next request
    problem(org.member.get("/v1/me"), 401, "unauthenticated")  # and on A

    assert on_b["auditor"].get("/v1/me").status_code == 200
    r = on_b["auditor"].post("/v1/me/token/rotate")  # on B
    assert r.status_code == 200, r.text
    problem(org.auditor.get("/v1/me"), 401, "unauthenticated")  # the old token, on A
    assert a.client(r.json()["token"]).get("/v1/me").status_code == 200

    removed = a.client(org.tokens["owner"]).get(
        "/v1/audit/events", params={"type": "MemberRemoved"}
    )
    events = removed.json()["events"]
    assert [(e["actor"], e["data"]["user_id"]) for e in events] == [
        (f"user:{_user_id(org.owner)}", member_id)
    ]
