"""E2E fixtures: one sandbox, and per module one real uvicorn server per store kind (SQLite,
PostgreSQL).

Every test makes its own organization(s), so tests share the servers without sharing state.
Every response body and every log line is recorded and checked for the sandbox's secrets after
each test (C6).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from psycopg.sql import SQL, Identifier

from adapters.logging_setup import redact_request_urls
from domain.access import ROLES
from entrypoints.bootstrap import Container
from entrypoints.server import serve_with_sandbox
from entrypoints.settings import Settings
from projections.views.indexes import last_reconciled
from runpod_sandbox import Sandbox

RESPONSES: list[bytes] = []


class _Recorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = record.getMessage()
        except Exception:  # a broken record is still a line we must see
            text = repr(record.msg)
        extra = " ".join(f"{k}={v}" for k, v in record.__dict__.items() if k not in _STD)
        self.lines.append(f"{record.name} {text} {extra} {record.exc_text or ''}")


_STD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
LOG = _Recorder()


@pytest.fixture(scope="session", autouse=True)
def _record_logs() -> Iterator[_Recorder]:
    root = logging.getLogger()
    old = root.level
    # As `tensorant serve` configures them: HTTP clients' request lines leave out URL queries
    # (a presigned URL's is a credential; tests fetch such URLs as a Pod does).
    redact_request_urls()
    root.addHandler(LOG)
    root.setLevel(logging.INFO)
    yield LOG
    root.removeHandler(LOG)
    root.setLevel(old)


def key_material(creds: dict[str, Any]) -> dict[str, str]:
    """The sandbox's secrets that pass through the API (C6): none may come back out."""
    return {
        "api_key": creds["api_key"],
        "read_only_api_key": creds["read_only_api_key"],
        "s3_secret_access_key": creds["s3_secret_access_key"],
        "custom_secret_access_key": creds["custom_s3"]["secret_access_key"],
        "custom_access_key_id": creds["custom_s3"]["access_key_id"],
        "hf_token": creds["hf_token"],
        "hf_token_restricted": creds["hf_token_restricted"],
    }


def assert_no_key_material(creds: dict[str, Any], responses: int = 0, lines: int = 0) -> None:
    """No recorded response body (from index `responses` on) and no log line (from `lines` on)
    holds any of the sandbox's secrets."""
    for name, secret in key_material(creds).items():
        needle = secret.encode()
        leaked = [body[:200] for body in RESPONSES[responses:] if needle in body]
        assert not leaked, f"{name} in a response body: {leaked[0]!r}"
        said = [line for line in LOG.lines[lines:] if secret in line]
        assert not said, f"{name} in a log line: {said[0][:300]}"


@pytest.fixture(autouse=True)
def _no_key_material_in_what_this_test_saw(request: pytest.FixtureRequest) -> Iterator[None]:
    """C6 after every e2e test that uses the shared sandbox: what it was answered and what was
    logged meanwhile hold none of the sandbox's secrets (test_zz_secrets adds the stored tables).
    Checked per test, so it holds whichever test process (pytest-xdist) ran the test."""
    box = request.getfixturevalue("sandbox") if "sandbox" in request.fixturenames else None
    responses, lines = len(RESPONSES), len(LOG.lines)
    yield
    if box is not None:
        assert_no_key_material(box.credentials(), responses, lines)


@pytest.fixture(scope="session")
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(startup_seconds=0.1) as sb:
        yield sb


@pytest.fixture(scope="session")
def creds(sandbox: Sandbox) -> dict[str, Any]:
    return sandbox.credentials()


def _record(response: httpx.Response) -> None:
    response.read()
    RESPONSES.append(response.content)


@dataclass
class Org:
    """One organization with a client per role (tokens shown once by add_member)."""

    id: str
    clients: dict[str, httpx.Client]
    tokens: dict[str, str]

    @property
    def owner(self) -> httpx.Client:
        return self.clients["owner"]

    @property
    def member(self) -> httpx.Client:
        return self.clients["member"]

    @property
    def auditor(self) -> httpx.Client:
        return self.clients["auditor"]

    @property
    def finance(self) -> httpx.Client:
        return self.clients["finance"]


@dataclass
class Api:
    """A running API server with the sandbox behind it."""

    kind: str
    base_url: str
    container: Container
    sandbox: Sandbox
    settings: Settings
    postgres: tuple[str, str] | None = None  # (url, schema)
    _clients: list[httpx.Client] = field(default_factory=list)

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        c = httpx.Client(
            base_url=self.base_url, headers=headers, timeout=30, event_hooks={"response": [_record]}
        )
        self._clients.append(c)
        return c

    def new_org(self, name: str = "Acme", mode: str = "own") -> Org:
        app = self.container.services
        org_id = app.organizations.create(f"{name} {uuid.uuid4().hex[:6]}", mode)
        tokens = {
            role: app.organizations.add_member(
                org_id, f"{role}-{uuid.uuid4().hex[:6]}@example.com", role
            ).token
            for role in ROLES
        }
        self.container.catch_up()
        return Org(org_id, {r: self.client(t) for r, t in tokens.items()}, tokens)

    def after_reconcile_passes(self, passes: int = 2, timeout: float = 20) -> None:
        """Wait for `passes` reconcile passes completed after this call (the heartbeat each
        complete pass records, `tensorant_reconcile_lag_seconds` in /metrics), then apply
        everything recorded to the views. The first pass may have begun before the call; the
        second began after it: what a pass would do about the state at the call is done and
        shown. Negative checks wait for this, never for a fixed time. Needs a moving clock."""
        views = self.container.views
        last, seen = last_reconciled(views), 0
        deadline = time.monotonic() + timeout
        while seen < passes:
            now = last_reconciled(views)
            if now != last:
                last, seen = now, seen + 1
                continue
            assert time.monotonic() < deadline, f"{seen} of {passes} reconcile passes"
            time.sleep(0.02)
        self.container.catch_up()

    def close(self) -> None:
        for c in self._clients:
            c.close()


def _pg_schema(url: str) -> str:
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SQL("CREATE SCHEMA {}").format(Identifier(schema)))
    return schema


def _drop(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(schema)))


@pytest.fixture(
    # Per module, not per session: a server reconciles every organization it holds each 0.5 s,
    # so a session-long server would spend the rest of the suite re-listing the Pods of every
    # organization every earlier module made, starving later tests of the CPU.
    scope="module",
    params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)],
)
def api(
    request: pytest.FixtureRequest, sandbox: Sandbox, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Api]:
    """The same test bodies on the embedded SQLite default and on PostgreSQL."""
    data_dir: Path = tmp_path_factory.mktemp(f"api-{request.param}")
    postgres: tuple[str, str] | None = None
    if request.param == "sqlite":
        settings = Settings(data_dir=data_dir)
    else:
        url = request.getfixturevalue("postgres_url")
        schema = _pg_schema(url)
        postgres = (url, schema)
        settings = Settings(data_dir=data_dir, database_url=f"{url}?schema={schema}")
    server, container = serve_with_sandbox(settings, sandbox, reconcile_interval=0.5)
    api = Api(request.param, server.base_url, container, sandbox, settings, postgres)
    try:
        yield api
    finally:
        api.close()
        server.stop()
        if postgres is not None:
            _drop(*postgres)


@pytest.fixture
def org(api: Api) -> Org:
    return api.new_org()


def problem(response: httpx.Response, status: int, slug: str) -> dict[str, Any]:
    """Assert a problem+json refusal of the given status and type; return its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = response.json()
    assert body["type"] == f"https://tensorant.dev/problems/{slug}", body
    assert body["status"] == status
    assert body["title"]
    assert body["detail"]
    return body


def volume_spec(
    creds: dict[str, Any],
    volume_id: str = "nv7eu1ro4k",
    datacenter_id: str = "EU-RO-1",
    **overrides: Any,
) -> dict[str, Any]:
    return {
        "kind": "runpod_volume",
        "volume_id": volume_id,
        "datacenter_id": datacenter_id,
        "access_key_id": creds["s3_access_key_id"],
        "secret_access_key": creds["s3_secret_access_key"],
        **overrides,
    }


def custom_spec(creds: dict[str, Any], **overrides: Any) -> dict[str, Any]:
    c = creds["custom_s3"]
    return {
        "kind": "s3",
        "endpoint_url": c["endpoint_url"],
        "bucket": c["bucket"],
        "region": c["region"],
        "access_key_id": c["access_key_id"],
        "secret_access_key": c["secret_access_key"],
        **overrides,
    }


def connect(org: Org, creds: dict[str, Any]) -> dict[str, Any]:
    r = org.owner.post("/v1/connections/runpod", json={"api_key": creds["api_key"]})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


def bind_volume(org: Org, creds: dict[str, Any]) -> dict[str, Any]:
    r = org.owner.put("/v1/storage", json=volume_spec(creds))
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def ready_org(api: Api, creds: dict[str, Any]) -> Org:
    """Compute connected and a network volume bound."""
    o = api.new_org()
    connect(o, creds)
    bind_volume(o, creds)
    return o
