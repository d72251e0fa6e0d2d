"""Every route of the OpenAPI document × every principal × own and foreign organization (A1, A2,
A4).

Principals: the four roles, no token, and a token that is not one. For each route the table
below says which roles may call it (from the API contract, not from the code under test), what
an allowed role gets in its own organization (a request refused by a rule *after*
authorization, or a harmless read, so the matrix changes nothing of its own), and a request
aimed at the other organization's object that would succeed for that object's owner.

For a foreign request an allowed role must get exactly what an unknown id gets (same status,
same body once the ids are swapped), a role without the permission 403, no token 401. Every
response to the caller's organization is searched for anything naming the foreign one (ids,
names, e-mails, tokens). After each route the foreign organization's audit head, its run logs
and its Pods at RunPod must be unchanged; at the end everything its owner can read is
byte-identical to before. The sandbox clock is frozen meanwhile, so nothing moves by itself.

A route served in /openapi.json without a row here fails `test_every_openapi_route_has_a_row`.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Api, Org, connect, volume_spec
from tests.e2e.flows import (
    RunPodConsole,
    draft,
    launch,
    private_stack,
    project_with_dataset,
    run_config,
    until,
    wait_state,
)

ROLES = ("owner", "member", "auditor", "finance")
PRINCIPALS = (*ROLES, "anonymous", "bad_token")
EVERYONE = frozenset(ROLES)
OWNER = frozenset({"owner"})
WRITERS = frozenset({"owner", "member"})  # projects, datasets, runs, cleanup actions
FINANCE = frozenset({"owner", "finance"})
AUDIT = frozenset({"owner", "auditor"})
PUBLIC = None  # no authentication at all
TRAINER = "trainer"  # the per-run token of the training container, never a member token
OTHER_VOLUME = ("nv2usks8m3", "US-KS-2")
LOOPBACK = "https://127.0.0.1:9/hook"
# Allow-listed (no DNS lookup), subscribed to what the matrix never causes: nothing is sent.
HOOK = {"url": "https://hooks.example.invalid/tensorant", "events": ["balance.low"]}


@dataclass
class Call:
    """One request: `path` is the OpenAPI template's path with its parameters filled in."""

    path: str
    json: Any = None
    params: dict[str, Any] | None = None
    files: dict[str, Any] | None = None
    stream: bool = False


@dataclass
class World:
    api: Api
    console: RunPodConsole
    creds: dict[str, Any]
    mine: Org
    other: Org
    ids: dict[str, str]  # mine: project, dataset, draft, cancelled, retained, orphan; other: o_*
    run_token: str  # the training container's token of my retained run
    foreign_markers: set[str] = field(default_factory=set)
    snapshot: dict[str, bytes] = field(default_factory=dict)
    fingerprint: dict[str, bytes] = field(default_factory=dict)
    extra_clients: dict[str, httpx.Client] = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    method: str
    route: str  # exactly as in /openapi.json
    who: frozenset[str] | str | None  # roles allowed; PUBLIC; or TRAINER
    own: Callable[[World], Call]
    own_status: int  # what an allowed role gets in its own organization
    foreign: Callable[[World], Call] | None = None  # would succeed for the foreign owner
    foreign_status: int = 404  # what an allowed role gets for it (an unknown id's answer)

    @property
    def id(self) -> str:
        return f"{self.method} {self.route}"


def _w(path: str, **kw: Any) -> Callable[[World], Call]:
    """A call whose `{name}` placeholders are filled from World.ids at run time."""
    return lambda w: Call(path.format(**w.ids), **kw)


def _json(path: str, body: Callable[[World], Any]) -> Callable[[World], Call]:
    return lambda w: Call(path.format(**w.ids), json=body(w))


ZIP = {"file": ("adapter.zip", b"PK\x05\x06" + b"\x00" * 18, "application/zip")}


def _config(w: World, prefix: str = "", **changes: Any) -> dict[str, Any]:
    return run_config(w.ids[f"{prefix}project"], w.ids[f"{prefix}dataset"], **changes)


def _dataset(w: World) -> dict[str, Any]:
    """A new version of an object the organization already uploaded (P1 reads it back)."""
    return {
        "name": "would-be-registered",
        "version": "2",
        "object_key": w.ids["o_dataset_key"],
    }


def _bad_volume(w: World) -> dict[str, Any]:
    return volume_spec(w.creds, *OTHER_VOLUME)


ROWS: tuple[Row, ...] = (
    Row("GET", "/healthz", PUBLIC, _w("/healthz"), 200),
    Row("GET", "/readyz", PUBLIC, _w("/readyz"), 200),
    Row("GET", "/v1/me", EVERYONE, _w("/v1/me"), 200),
    Row("GET", "/v1/organization", EVERYONE, _w("/v1/organization"), 200),
    # Members: owner-only where it changes others.
    Row("GET", "/v1/members", OWNER, _w("/v1/members"), 200),
    Row(
        "POST",
        "/v1/members",
        OWNER,
        lambda w: Call(
            "/v1/members",
            json={"email": f"inv-{uuid.uuid4().hex[:8]}@example.com", "role": "member"},
        ),
        201,
    ),
    Row(  # the owner keeps the owner role: a change that changes nothing
        "PATCH",
        "/v1/members/{user_id}",
        OWNER,
        lambda w: Call(
            f"/v1/members/{w.mine.owner.get('/v1/me').json()['user_id']}", json={"role": "owner"}
        ),
        200,
        foreign=lambda w: Call(
            f"/v1/members/{w.other.member.get('/v1/me').json()['user_id']}", json={"role": "owner"}
        ),
    ),
    Row(  # a member invited for the purpose is removed (by the owner, who asks first)
        "DELETE",
        "/v1/members/{user_id}",
        OWNER,
        lambda w: Call(
            "/v1/members/"
            + w.mine.owner.post(
                "/v1/members",
                json={"email": f"gone-{uuid.uuid4().hex[:8]}@example.com", "role": "member"},
            ).json()["user_id"]
        ),
        204,
        foreign=lambda w: Call(f"/v1/members/{w.other.member.get('/v1/me').json()['user_id']}"),
    ),
    Row("GET", "/v1/members/invites", OWNER, _w("/v1/members/invites"), 200),
    Row(
        "POST",
        "/v1/members/invites",
        OWNER,
        lambda w: Call(
            "/v1/members/invites",
            json={"email": f"link-{uuid.uuid4().hex[:8]}@example.com", "role": "member"},
        ),
        201,
    ),
    Row(  # an invite made for the purpose is revoked; another organization's is not found
        "DELETE",
        "/v1/members/invites/{invite_id}",
        OWNER,
        lambda w: Call(
            "/v1/members/invites/"
            + w.mine.owner.post(
                "/v1/members/invites",
                json={"email": f"rev-{uuid.uuid4().hex[:8]}@example.com", "role": "member"},
            ).json()["id"]
        ),
        204,
        foreign=_w("/v1/members/invites/{o_invite}"),
    ),
    # Rotating would replace the matrix's own tokens: an invalid expiry answers 422 after the
    # authentication that every role passes.
    Row(
        "POST",
        "/v1/me/token/rotate",
        EVERYONE,
        _json("/v1/me/token/rotate", lambda w: {"expires_in_days": "3"}),
        422,
    ),
    Row("GET", "/v1/connections", EVERYONE, _w("/v1/connections"), 200),
    # Already connected: 409 (use rotate). A key RunPod rejects: 422. Pods depend on it: 409.
    Row(
        "POST",
        "/v1/connections/runpod",
        OWNER,
        _json("/v1/connections/runpod", lambda w: {"api_key": w.creds["api_key"]}),
        409,
    ),
    Row("DELETE", "/v1/connections/runpod", OWNER, _w("/v1/connections/runpod"), 409),
    Row(
        "POST",
        "/v1/connections/runpod/rotate",
        OWNER,
        _json("/v1/connections/runpod/rotate", lambda w: {"api_key": "rpa_" + "Z" * 40}),
        422,
    ),
    # A token the Hub refuses: 422 after authorization. Nothing connected to remove: 409.
    Row(
        "PUT",
        "/v1/connections/huggingface",
        OWNER,
        _json("/v1/connections/huggingface", lambda w: {"token": "hf_" + "Z" * 34}),
        422,
    ),
    Row("DELETE", "/v1/connections/huggingface", OWNER, _w("/v1/connections/huggingface"), 409),
    # A baked image's registry credentials: attached (RunPod keeps one set per organization)
    # and removed, owner only.
    Row(
        "PUT",
        "/v1/connections/registry",
        OWNER,
        _json("/v1/connections/registry", lambda w: {"username": "bot", "password": "tok-1234"}),
        200,
    ),
    Row("DELETE", "/v1/connections/registry", OWNER, _w("/v1/connections/registry"), 204),
    Row("GET", "/v1/storage/volumes", OWNER, _w("/v1/storage/volumes"), 200),
    Row("PUT", "/v1/storage", OWNER, _json("/v1/storage", _bad_volume), 409),
    Row(
        "POST",
        "/v1/storage/rotate",
        OWNER,
        _json(
            "/v1/storage/rotate",
            lambda w: {
                "access_key_id": w.creds["s3_access_key_id"],
                "secret_access_key": "rps_" + "X" * 40,
            },
        ),
        422,
    ),
    Row(
        "POST",
        "/v1/storage/resize",
        OWNER,
        _json("/v1/storage/resize", lambda w: {"size_gb": 1}),
        422,
    ),
    Row("GET", "/v1/projects", EVERYONE, _w("/v1/projects"), 200),
    Row("POST", "/v1/projects", WRITERS, _json("/v1/projects", lambda w: {"name": "   "}), 422),
    Row(
        "POST",
        "/v1/projects/{project_id}/datasets",
        WRITERS,
        _json("/v1/projects/{project}/datasets", lambda w: {**_dataset(w), "object_key": "/abs"}),
        422,
        foreign=_json("/v1/projects/{o_project}/datasets", _dataset),
    ),
    # P1: a presigned PUT is for custom S3; a network volume refuses it (storage-check-failed).
    Row(
        "POST",
        "/v1/projects/{project_id}/datasets/uploads",
        WRITERS,
        _json(
            "/v1/projects/{project}/datasets/uploads",
            lambda w: {"name": "big", "version": "1", "size_bytes": 10},
        ),
        422,
    ),
    Row(
        "GET",
        "/v1/projects/{project_id}/datasets",
        EVERYONE,
        _w("/v1/projects/{project}/datasets"),
        200,
        foreign=_w("/v1/projects/{o_project}/datasets"),
    ),
    Row("GET", "/v1/gpus", EVERYONE, _w("/v1/gpus"), 200),
    Row("GET", "/v1/base-models", EVERYONE, _w("/v1/base-models"), 200),
    Row("GET", "/v1/runs", EVERYONE, _w("/v1/runs"), 200),
    Row(
        "POST",
        "/v1/runs",
        WRITERS,
        _json("/v1/runs", lambda w: _config(w, gpu_type_id="Tesla T4")),
        422,
        # A draft in my organization on the foreign project and dataset version.
        foreign=_json("/v1/runs", lambda w: _config(w, "o_")),
    ),
    Row(
        "GET",
        "/v1/runs/{run_id}",
        EVERYONE,
        _w("/v1/runs/{retained}"),
        200,
        foreign=_w("/v1/runs/{o_retained}"),
    ),
    Row(
        "PATCH",
        "/v1/runs/{run_id}",
        WRITERS,
        _json("/v1/runs/{retained}", _config),  # not a draft: 409
        409,
        foreign=_json("/v1/runs/{o_draft}", lambda w: _config(w, "o_", max_runtime_minutes=30)),
    ),
    Row(
        "DELETE",
        "/v1/runs/{run_id}",
        WRITERS,
        _w("/v1/runs/{retained}"),
        409,
        foreign=_w("/v1/runs/{o_draft}"),
    ),
    Row(
        "POST",
        "/v1/runs/{run_id}/launch",
        WRITERS,
        _json("/v1/runs/{draft}/launch", lambda w: {}),  # no confirmation: 422
        422,
        foreign=_json(
            "/v1/runs/{o_draft}/launch",
            lambda w: {"confirm": True, "accepted_price_per_hour": "1.64"},
        ),
    ),
    Row(
        "POST",
        "/v1/runs/{run_id}/cancel",
        WRITERS,
        _w("/v1/runs/{cancelled}/cancel"),  # already cancelled: 409
        409,
        foreign=_w("/v1/runs/{o_retained}/cancel"),
    ),
    Row(
        "POST",
        "/v1/runs/{run_id}/recovery/verify",
        WRITERS,
        _w("/v1/runs/{draft}/recovery/verify"),  # a draft has nothing to recover: 409
        409,
        foreign=_w("/v1/runs/{o_retained}/recovery/verify"),
    ),
    Row(
        "POST",
        "/v1/runs/{run_id}/recovery/upload",
        WRITERS,
        _w("/v1/runs/{draft}/recovery/upload", files=ZIP),
        409,
        foreign=_w("/v1/runs/{o_retained}/recovery/upload", files=ZIP),
    ),
    Row(
        "POST",
        "/v1/runs/{run_id}/pod/resume",
        WRITERS,
        _json("/v1/runs/{retained}/pod/resume", lambda w: {}),  # no confirmation: 422
        422,
        foreign=_json("/v1/runs/{o_retained}/pod/resume", lambda w: {"confirm_billing": True}),
    ),
    Row(
        "POST",
        "/v1/runs/{run_id}/pod/release",
        WRITERS,
        _json("/v1/runs/{retained}/pod/release", lambda w: {}),  # unverified: 409
        409,
        foreign=_json(
            "/v1/runs/{o_retained}/pod/release", lambda w: {"confirm_delete_unverified": True}
        ),
    ),
    Row(
        "GET",
        "/v1/runs/{run_id}/adapter",
        WRITERS,
        _w("/v1/runs/{succeeded}/adapter"),  # the verified adapter's bytes (R19)
        200,
        foreign=_w("/v1/runs/{o_succeeded}/adapter"),
    ),
    Row(
        "GET",
        "/v1/runs/{run_id}/events",
        EVERYONE,
        _w("/v1/runs/{retained}/events"),
        200,
        foreign=_w("/v1/runs/{o_retained}/events"),
    ),
    Row(
        "GET",
        "/v1/runs/{run_id}/logs",
        EVERYONE,
        _w("/v1/runs/{retained}/logs"),
        200,
        foreign=_w("/v1/runs/{o_retained}/logs"),
    ),
    Row(
        "GET",
        "/v1/runs/{run_id}/metrics",
        EVERYONE,
        _w("/v1/runs/{succeeded}/metrics"),  # R17: the run's metric points
        200,
        foreign=_w("/v1/runs/{o_succeeded}/metrics"),
    ),
    Row(
        "GET",
        "/v1/runs/{run_id}/logs/stream",
        EVERYONE,
        _w("/v1/runs/{cancelled}/logs/stream", stream=True),  # ended: the stream ends at once
        200,
        foreign=_w("/v1/runs/{o_succeeded}/logs/stream", stream=True),
    ),
    # The trainer's callbacks take the run's own token: a member token is just another wrong
    # token (404, like an unknown run), no token 401. Foreign: my run's token on their run.
    *(
        Row(
            "POST",
            f"/v1/trainer/runs/{{run_id}}/{what}",
            TRAINER,
            _w(f"/v1/trainer/runs/{{retained}}/{what}", json=body),
            404,
            foreign=_w(f"/v1/trainer/runs/{{o_retained}}/{what}", json=body),
        )
        for what, body in (
            ("logs", {"lines": [{"text": "written into another organization's run"}]}),
            ("progress", {"phase": "exporting", "step": 5, "total_steps": 5}),
            (
                "exported",
                {"object_key": "runs/x/adapter.zip", "sha256": "ef" * 32, "size_bytes": 22},
            ),
            ("failed", {"reason": "export_failed", "detail": "forged"}),
        )
    ),
    # C7: the Hugging Face token goes only to a live run on a gated model with its own token;
    # every other token finds nothing (404), as on the callbacks above. The matrix's runs train
    # open models, so no foreign object would succeed for its owner: no foreign call here (the
    # run-token check is the callbacks' `authenticate`, proven foreign-safe above).
    Row(
        "GET",
        "/v1/trainer/runs/{run_id}/hub-token",
        TRAINER,
        _w("/v1/trainer/runs/{retained}/hub-token"),
        404,
    ),
    Row("GET", "/v1/cleanup", EVERYONE, _w("/v1/cleanup"), 200),
    Row(
        "POST",
        "/v1/cleanup/orphans/{pod_id}/release",
        WRITERS,
        _json("/v1/cleanup/orphans/{orphan}/release", lambda w: {}),  # no confirmation: 422
        422,
        foreign=_json("/v1/cleanup/orphans/{o_orphan}/release", lambda w: {"confirm": True}),
    ),
    Row("GET", "/v1/billing/costs", FINANCE, _w("/v1/billing/costs"), 200),
    Row("GET", "/v1/billing/export", FINANCE, _w("/v1/billing/export"), 200),
    Row("GET", "/v1/billing/reconciliation", FINANCE, _w("/v1/billing/reconciliation"), 200),
    Row(
        "GET",
        "/v1/audit/events",
        AUDIT,
        _w("/v1/audit/events"),
        200,
        # Filtering my history by their run's id finds nothing, as for an unknown id.
        foreign=lambda w: Call("/v1/audit/events", params={"aggregate_id": w.ids["o_retained"]}),
        foreign_status=200,
    ),
    Row("GET", "/v1/audit/verify", AUDIT, _w("/v1/audit/verify"), 200),
    # R20: a URL the SSRF guard refuses (loopback, not allow-listed) registers nothing.
    Row("POST", "/v1/webhooks", OWNER, _json("/v1/webhooks", lambda w: {"url": LOOPBACK}), 422),
    Row("GET", "/v1/webhooks", OWNER, _w("/v1/webhooks"), 200),
    Row(
        "DELETE",
        "/v1/webhooks/{webhook_id}",
        OWNER,
        _w("/v1/webhooks/{draft}"),  # an id that is no webhook: nothing removed
        404,
        foreign=_w("/v1/webhooks/{o_webhook}"),
    ),
    Row(
        "GET",
        "/v1/webhooks/{webhook_id}/deliveries",
        OWNER,
        _w("/v1/webhooks/{webhook}/deliveries"),
        200,
        foreign=_w("/v1/webhooks/{o_webhook}/deliveries"),
    ),
    # V1, V2: a draft is not deployable (refused before any RunPod call); their succeeded run
    # is not found, as an unknown run is. An id that is no deployment is not found.
    Row(
        "POST",
        "/v1/deployments",
        WRITERS,
        _json("/v1/deployments", lambda w: {"run_id": w.ids["draft"]}),
        409,
        foreign=_json("/v1/deployments", lambda w: {"run_id": w.ids["o_succeeded"]}),
    ),
    Row("GET", "/v1/deployments", EVERYONE, _w("/v1/deployments"), 200),
    Row("GET", "/v1/deployments/{deployment_id}", EVERYONE, _w("/v1/deployments/{draft}"), 404),
    Row("DELETE", "/v1/deployments/{deployment_id}", WRITERS, _w("/v1/deployments/{draft}"), 404),
    Row(
        "POST",
        "/v1/deployments/{deployment_id}/chat/completions",
        WRITERS,
        _json(
            "/v1/deployments/{draft}/chat/completions",
            lambda w: {"messages": [{"role": "user", "content": "hi"}]},
        ),
        404,
    ),
    Row(
        "GET",
        "/v1/audit/{aggregate_type}/{aggregate_id}",
        AUDIT,
        _w("/v1/audit/run/{retained}"),
        200,
        foreign=_w("/v1/audit/run/{o_retained}"),
    ),
)


# ------------------------------------------------------------------------------ the world


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    # The account is read once after connecting, then not again: a later balance read would
    # be a change in the foreign organization that no request of the matrix made.
    refresh = {
        "account_refresh_interval": 1e9,
        "webhook_allow_endpoints": ["https://hooks.example.invalid/"],
    }
    with private_stack(tmp_path_factory, "authz", settings=refresh) as (api, console):
        creds = api.sandbox.credentials()
        yield build_world(api, console, creds)
        console.freeze(False)


def build_world(api: Api, console: RunPodConsole, creds: dict[str, Any]) -> World:
    tag = uuid.uuid4().hex[:8]
    mine, other = api.new_org("Mine"), api.new_org(f"Foreign-{tag}")
    orgs = (("", mine, ("nv7eu1ro4k", "EU-RO-1")), ("o_", other, OTHER_VOLUME))
    ids: dict[str, str] = {}
    for prefix, org, volume in orgs:
        connect(org, creds)
        r = org.owner.put("/v1/storage", json=volume_spec(creds, *volume))
        assert r.status_code == 200, r.text
        name = "mine" if not prefix else f"foreign-project-{tag}"
        project, dataset = project_with_dataset(org, name)
        config = run_config(project, dataset)
        ids |= {f"{prefix}project": project, f"{prefix}dataset": dataset}
        [dv] = org.member.get(f"/v1/projects/{project}/datasets").json()
        ids[f"{prefix}dataset_key"] = dv["object_key"]
        for key in ("draft", "cancelled", "retained", "succeeded"):
            ids[f"{prefix}{key}"] = draft(org, config)["id"]
        assert org.member.post(f"/v1/runs/{ids[prefix + 'cancelled']}/cancel").status_code == 202
        hook = org.owner.post("/v1/webhooks", json=HOOK)
        assert hook.status_code == 201, hook.text
        ids[f"{prefix}webhook"] = hook.json()["id"]
        invite = org.owner.post(
            "/v1/members/invites",
            json={"email": f"inv-{name}@example.com", "role": "auditor"},
        )
        assert invite.status_code == 201, invite.text
        ids[f"{prefix}invite"] = invite.json()["id"]
    # Both organizations' export-failing runs first (the sandbox's next two Pods), then the rest.
    console.scenario("export_fails", 2)
    for prefix, org, _ in orgs:
        launch(org, ids[f"{prefix}retained"])
    for prefix, org, _ in orgs:
        run_path = f"/v1/runs/{ids[prefix + 'retained']}"
        until(partial(pod_of, org, run_path), what="the first Pod")
    for prefix, org, _ in orgs:
        launch(org, ids[f"{prefix}succeeded"])
        # A Pod with our naming that no live run owns: an orphan of this organization only
        # (it names one of its cancelled runs; for the other organization that run is not theirs).
        ids[f"{prefix}orphan"] = console.create_pod(
            name=f"tensorant-run-{ids[prefix + 'cancelled']}"
        )["id"]
    for prefix, org, _ in orgs:
        wait_state(org, ids[f"{prefix}retained"], "needs_recovery")
        wait_state(org, ids[f"{prefix}succeeded"], "succeeded")
        until(partial(orphan_listed, org, ids[f"{prefix}orphan"]), what="the orphan")
    retained = mine.member.get(f"/v1/runs/{ids['retained']}").json()
    token = console.pod(retained["pod_id"])["env"]["TENSORANT_RUN_TOKEN"]
    w = World(api, console, creds, mine, other, ids, token)
    w.foreign_markers = markers(w, tag)
    console.freeze()
    w.snapshot = settled(w)
    w.fingerprint = fingerprint(w)
    return w


def pod_of(org: Org, run_path: str) -> str | None:
    pod_id: str | None = org.member.get(run_path).json()["pod_id"]
    return pod_id


def orphan_listed(org: Org, pod_id: str) -> bool:
    return any(i["pod_id"] == pod_id for i in org.member.get("/v1/cleanup").json()["items"])


def settled(w: World) -> dict[str, bytes]:
    """The snapshot once two in a row, half a second apart, agree (the views caught up with
    whatever was recorded before the clock stopped)."""
    before = snapshot(w)

    def same() -> dict[str, bytes] | None:
        nonlocal before
        time.sleep(0.5)
        now = snapshot(w)
        stable, before = now == before, now
        return now if stable else None

    found: dict[str, bytes] = until(same, 15, "the foreign organization to settle")
    return found


def markers(w: World, tag: str) -> set[str]:
    """Strings that name the foreign organization and nothing else."""
    o = w.other
    found = {o.id, tag, *o.tokens.values()}
    for role in ROLES:
        me = o.clients[role].get("/v1/me").json()
        found |= {me["user_id"], me["email"]}
    found.add(o.owner.get("/v1/organization").json()["name"])
    for key, value in w.ids.items():
        if key.startswith("o_"):
            found.add(value)
    for run in o.owner.get("/v1/runs").json():
        found |= {v for v in (run["pod_id"], run.get("pod_host_id")) if v}
    for dv in o.owner.get(f"/v1/projects/{w.ids['o_project']}/datasets").json():
        found |= {dv["id"], dv["name"], dv["object_key"]}
    return found


def _all_audit(org: Org) -> bytes:
    pages, after = [], 0
    while True:
        r = org.owner.get("/v1/audit/events", params={"after": after, "limit": 1000})
        pages.append(r.content)
        after = r.json()["next_after"]
        if after is None:
            return b"\n".join(pages)


def snapshot(w: World) -> dict[str, bytes]:
    """Everything the foreign owner can read, and the foreign Pods as RunPod has them."""
    o, ids = w.other.owner, w.ids
    paths = [
        "/v1/organization",
        "/v1/connections",
        "/v1/projects",
        f"/v1/projects/{ids['o_project']}/datasets",
        "/v1/runs",
        "/v1/cleanup",
        "/v1/audit/verify",
        "/v1/billing/costs",
    ]
    for key in ("o_draft", "o_cancelled", "o_retained", "o_succeeded"):
        paths += [
            f"/v1/runs/{ids[key]}",
            f"/v1/runs/{ids[key]}/events?limit=500",
            f"/v1/runs/{ids[key]}/logs?limit=1000",
            f"/v1/audit/run/{ids[key]}",
        ]
    out = {p: o.get(p).content for p in paths}
    out["audit"] = _all_audit(w.other)
    out["pods"] = repr(foreign_pods(w)).encode()
    return out


def foreign_pods(w: World) -> list[tuple[str, str, str]]:
    names = {
        f"tensorant-run-{w.ids[k]}" for k in ("o_retained", "o_succeeded", "o_draft", "o_cancelled")
    }
    return sorted((p["id"], p["name"], p["status"]) for p in w.console.pods() if p["name"] in names)


def fingerprint(w: World) -> dict[str, bytes]:
    """Cheap, after every route: the foreign hash-chain head, logs and Pods."""
    o, ids = w.other.owner, w.ids
    return {
        "head": o.get("/v1/audit/verify").content,
        "logs": o.get(f"/v1/runs/{ids['o_retained']}/logs?limit=1000").content,
        "pods": repr(foreign_pods(w)).encode(),
    }


# ------------------------------------------------------------------------------ requests


def client(w: World, principal: str) -> httpx.Client:
    if principal in ROLES:
        return w.mine.clients[principal]
    if principal not in w.extra_clients:
        token = {"anonymous": None, "bad_token": "not-a-token-" + uuid.uuid4().hex}.get(
            principal, w.run_token
        )
        w.extra_clients[principal] = w.api.client(token)
    return w.extra_clients[principal]


def send(c: httpx.Client, method: str, call: Call) -> httpx.Response:
    if call.stream:
        with c.stream(method, call.path, params=call.params, timeout=15) as r:
            r.read()
            return r
    return c.request(method, call.path, json=call.json, params=call.params, files=call.files)


def expected(row: Row, principal: str, allowed_status: int) -> int:
    if row.who is PUBLIC:
        return 200
    if row.who == TRAINER:
        return 401 if principal == "anonymous" else allowed_status
    if principal in {"anonymous", "bad_token"}:
        return 401
    assert isinstance(row.who, frozenset)
    return allowed_status if principal in row.who else 403


SLUG = {401: "unauthenticated", 403: "forbidden", 404: "not-found"}


def check_status(r: httpx.Response, status: int, what: str) -> None:
    assert r.status_code == status, f"{what}: wanted {status}, got {r.status_code}: {r.text[:300]}"
    if status in SLUG:
        assert r.headers["content-type"].startswith("application/problem+json"), what
        assert r.json()["type"].endswith("/" + SLUG[status]), f"{what}: {r.text[:300]}"
    assert r.status_code < 500, what


def check_no_leak(w: World, r: httpx.Response, sent: set[str], what: str) -> None:
    text = r.text
    for value in sent:  # ids the caller sent may be echoed ("run X not found"): no news
        text = text.replace(value, "<sent>")
    leaked = sorted(m for m in w.foreign_markers if m and m in text)
    assert not leaked, f"{what} names the foreign organization: {leaked} in {r.text[:500]}"


def unknown_twin(w: World, call: Call) -> tuple[Call, dict[str, str]]:
    """The same call with every foreign id replaced by an id nobody has."""
    swaps = {}
    for key, value in w.ids.items():
        if key.startswith("o_"):
            swaps[value] = (
                "".join(c for c in uuid.uuid4().hex if c.isalnum())[:14]
                if key == "o_orphan"
                else str(uuid.uuid4())
            )

    def sub(value: Any) -> Any:
        if isinstance(value, str):
            for old, new in swaps.items():
                value = value.replace(old, new)
            return value
        if isinstance(value, dict):
            return {k: sub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [sub(v) for v in value]
        return value

    twin = Call(sub(call.path), sub(call.json), sub(call.params), call.files, call.stream)
    return twin, swaps


def normalized(r: httpx.Response, ids: list[str]) -> str:
    text = r.text
    for i, value in enumerate(ids):
        text = text.replace(value, f"<id{i}>")
    return re.sub(r'"request_id":\s*"[^"]*"', '"request_id": "-"', text)


# ------------------------------------------------------------------------------ the tests


def test_every_openapi_route_has_a_row(world: World) -> None:
    """Acceptance 3: a route added later without a row here fails this test (and a row for a
    route that no longer exists does too)."""
    spec = httpx.get(f"{world.api.base_url}/openapi.json").json()
    served = {
        f"{method.upper()} {path}"
        for path, operations in spec["paths"].items()
        for method in operations
        if method in ("get", "put", "post", "patch", "delete")
    }
    rows = [row.id for row in ROWS]
    assert len(rows) == len(set(rows)), "a route has two rows"
    assert served - set(rows) == set(), "routes without an authorization-matrix row"
    assert set(rows) - served == set(), "rows for routes the API does not serve"


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_route(world: World, row: Row) -> None:
    w = world
    own = row.own(w)
    for principal in PRINCIPALS:
        what = f"{row.id} as {principal} (own organization)"
        r = send(client(w, principal), row.method, own)
        check_status(r, expected(row, principal, row.own_status), what)
        check_no_leak(w, r, set(), what)
    if row.foreign is not None:
        foreign = row.foreign(w)
        twin, swaps = unknown_twin(w, foreign)
        principals = [*PRINCIPALS, "run_token"] if row.who == TRAINER else PRINCIPALS
        for principal in principals:
            what = f"{row.id} as {principal} on the foreign organization's object"
            c = client(w, principal)
            r = send(c, row.method, foreign)
            want = row.foreign_status if principal == "run_token" else None
            check_status(r, want or expected(row, principal, row.foreign_status), what)
            sent = {
                old for old in swaps if old in repr((foreign.path, foreign.json, foreign.params))
            }
            check_no_leak(w, r, sent, what)
            u = send(c, row.method, twin)
            assert u.status_code == r.status_code, f"{what}: unknown id answers {u.status_code}"
            assert normalized(r, list(swaps)) == normalized(u, list(swaps.values())), (
                f"{what}: the answer differs from an unknown id's: {r.text[:300]} vs {u.text[:300]}"
            )
    before, w.fingerprint = w.fingerprint, fingerprint(w)
    assert w.fingerprint == before, f"{row.id} changed the foreign organization"


def test_zz_the_foreign_organization_is_byte_identical_afterwards(world: World) -> None:
    world.api.container.catch_up()  # a write that slipped through is in the views now
    after = snapshot(world)
    changed = sorted(k for k in after if after[k] != world.snapshot[k])
    assert not changed, f"changed in the foreign organization: {changed}"


def test_zz_every_foreign_request_reaches_a_real_object_for_its_owner(world: World) -> None:
    """The matrix's foreign requests are not 404 for a trivial reason: sent by the foreign
    organization itself (its owner; its run's own token for the trainer's routes) each finds
    its object and passes validation. Runs last: it changes the foreign organization."""
    w = world
    retained = w.other.owner.get(f"/v1/runs/{w.ids['o_retained']}").json()
    trainer = w.api.client(w.console.pod(retained["pod_id"])["env"]["TENSORANT_RUN_TOKEN"])
    rows = sorted((r for r in ROWS if r.foreign), key=lambda r: r.method == "DELETE")
    for row in rows:
        assert row.foreign is not None
        r = send(trainer if row.who == TRAINER else w.other.owner, row.method, row.foreign(w))
        what = f"{row.id} by the foreign organization itself"
        assert r.status_code != 404 and r.status_code < 500, f"{what}: {r.text[:300]}"
        if r.status_code == 422:
            assert not r.json()["type"].endswith("/validation-error"), f"{what}: {r.text}"
