"""Every endpoint x every role x own/foreign organization (A2, A4).

Bodies are valid for the schema but refused by a rule after the role check, so the matrix
changes nothing: an allowed role gets past authorization (no 401/403/404), a role without
the permission gets 403, and another organization's ids answer 404 exactly like unknown ids.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from domain.access import PERMISSIONS, ROLES
from tests.e2e.conftest import Api, Org, ready_org, volume_spec


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # `{pid}` is a project id
    permission: str
    body: Any = None

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


DATASET = {
    "name": "d",
    "version": "1",
    "object_key": "/abs",
    "size_bytes": 1,
    "row_count": 1,
    "sha256": "0" * 64,
}


def endpoints(creds: dict[str, Any]) -> list[Endpoint]:
    return [
        Endpoint("GET", "/v1/me", "read"),
        Endpoint("GET", "/v1/organization", "read"),
        Endpoint("GET", "/v1/connections", "read"),
        Endpoint(
            "POST", "/v1/connections/runpod", "manage_connections", {"api_key": "rpa_" + "Z" * 40}
        ),
        Endpoint(
            "POST",
            "/v1/connections/runpod/rotate",
            "manage_connections",
            {"api_key": "rpa_" + "Z" * 40},
        ),
        Endpoint("DELETE", "/v1/connections/runpod", "manage_connections"),
        Endpoint("GET", "/v1/storage/volumes", "discover_volumes"),
        Endpoint(
            "PUT", "/v1/storage", "manage_connections", volume_spec(creds, "nv5camtl9p", "CA-MTL-1")
        ),
        Endpoint(
            "POST",
            "/v1/storage/rotate",
            "manage_connections",
            {"access_key_id": creds["s3_access_key_id"], "secret_access_key": "rps_" + "X" * 40},
        ),
        Endpoint("POST", "/v1/storage/resize", "manage_connections", {"size_gb": 1}),
        Endpoint("POST", "/v1/projects", "manage_projects", {"name": "   "}),
        Endpoint("GET", "/v1/projects", "read"),
        Endpoint("POST", "/v1/projects/{pid}/datasets", "manage_projects", DATASET),
        Endpoint("GET", "/v1/projects/{pid}/datasets", "read"),
        Endpoint("GET", "/v1/gpus", "read"),
    ]


@dataclass
class World:
    mine: Org
    other: Org
    my_project: str
    other_project: str


@pytest.fixture(scope="module")
def world(api: Api, creds: dict[str, Any]) -> Iterator[World]:
    mine, other = ready_org(api, creds), ready_org(api, creds)
    pids = [o.owner.post("/v1/projects", json={"name": "p"}).json()["id"] for o in (mine, other)]
    # Pods "depend on the key" so DELETE is refused by C4 after the role check.
    with api.pods_depend_on_keys(lambda org_id: 1):
        yield World(mine, other, pids[0], pids[1])


def _call(org: Org, role: str, e: Endpoint, pid: str) -> Any:
    return org.clients[role].request(e.method, e.path.replace("{pid}", pid), json=e.body)


@pytest.mark.parametrize("role", ROLES)
def test_every_endpoint_in_the_own_organization(
    world: World, creds: dict[str, Any], role: str
) -> None:
    for e in endpoints(creds):
        r = _call(world.mine, role, e, world.my_project)
        if role in PERMISSIONS[e.permission]:
            assert r.status_code not in (401, 403, 404), f"{e} as {role}: {r.text}"
            assert r.status_code < 500, f"{e} as {role}: {r.text}"
        else:
            assert r.status_code == 403, f"{e} as {role}: {r.text}"
            assert r.json()["type"].endswith("/forbidden")


@pytest.mark.parametrize("role", ROLES)
def test_every_endpoint_with_a_foreign_id_answers_like_an_unknown_id(
    world: World, creds: dict[str, Any], role: str
) -> None:
    for e in (e for e in endpoints(creds) if "{pid}" in e.path):
        foreign = _call(world.mine, role, e, world.other_project)
        unknown = _call(world.mine, role, e, str(uuid.uuid4()))
        assert foreign.status_code == unknown.status_code, f"{e} as {role}"
        assert foreign.json()["type"] == unknown.json()["type"]
        expected = 404 if role in PERMISSIONS[e.permission] else 403
        assert foreign.status_code == expected, f"{e} as {role}: {foreign.text}"


@pytest.mark.parametrize("role", ROLES)
def test_collections_never_show_another_organizations_objects(world: World, role: str) -> None:
    c = world.mine.clients[role]
    assert {p["id"] for p in c.get("/v1/projects").json()} == {world.my_project}
    assert c.get("/v1/organization").json()["id"] == world.mine.id
    assert c.get("/v1/me").json()["organization_id"] == world.mine.id
    foreign_text = world.other.owner.get("/v1/projects").text
    assert world.my_project not in foreign_text
