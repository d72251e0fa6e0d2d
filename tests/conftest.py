"""Shared fixtures: services at their default local address; under CI=true a missing one fails."""

from __future__ import annotations

import fcntl
import os
import socket
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import pytest

# The tiny model and trained run (T1) are session fixtures shared by tests/trainer and the adapter
# verifier's tests; registered once here so the model is built and trained once per session.
pytest_plugins = ("tests.trainer.fixtures",)

IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
# The shared RabbitMQ and Redis servers may serve several test sessions at once (and operators'
# deployments): each session's workers consume their own queue, never another session's runs.
# Tests hold several PostgreSQL deployments at once: keep their idle connections few so the
# suite stays well under the server's max_connections (100).
os.environ.setdefault("TENSORANT_DB_POOL_SIZE", "2")
# Every PostgreSQL connection the suite (and the servers it starts) opens says it is the suite's,
# so pg_stat_activity tells them from a benchmark's or an operator's.
os.environ.setdefault("PGAPPNAME", "tensorant-tests")
# A two-core machine running the whole suite (a trainer subprocess, several servers and their
# reconcilers) can keep a view behind for more than the production default of 5 s; the tests
# assert what a command does, not how fast a loaded machine projects it (bench/ measures that).
os.environ.setdefault("TENSORANT_READ_YOUR_WRITES_TIMEOUT", "30")
# Every test client calls from 127.0.0.1 and many tests send bad tokens or keys on purpose;
# the failure limits are proven by their own tests with low limits.
os.environ.setdefault("TENSORANT_AUTH_FAILURE_LIMIT", "1000000")
# Counting a draft's tokens starts a child that imports transformers (P1): the stacks of tests
# that do not look at counts leave it off; tests/e2e/test_token_counts.py turns it on.
os.environ.setdefault("TENSORANT_COUNT_TOKENS", "false")
os.environ.setdefault("TENSORANT_CHECK_FAILURE_LIMIT", "1000000")
# pytest-xdist's workers inherit the environment of the process that started them: a name set
# there once let both processes' workers take each other's messages (a run's launch consumed by
# a stack that never heard of it, so the run stayed launching). Each process names its own, and
# stacks on a real broker take a fresh one each (`fresh_queue`) so what one left behind never
# reaches the next.
if os.environ.get("TENSORANT_QUEUE_NAME", "tensorant-test-").startswith("tensorant-test-"):
    os.environ["TENSORANT_QUEUE_NAME"] = f"tensorant-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
POSTGRES_URL = os.environ.get(
    "TENSORANT_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def unavailable(reason: str) -> NoReturn:
    """The one way a test gives up on a missing service or tool: a skip with its reason on a
    developer's machine, a failure under CI=true (where a skip would hide a gap)."""
    if IN_CI:
        pytest.fail(f"{reason} (CI=true: tests needing it must not skip)")
    pytest.skip(reason)


def require_service(name: str, host: str, port: int) -> None:
    if not _reachable(host, port):
        unavailable(f"{name} is not reachable at {host}:{port}")


AMQP_URL = os.environ.get("TENSORANT_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")


@contextmanager
def fresh_queue(amqp_url: str | None = AMQP_URL) -> Iterator[str]:
    """A broker queue name no other stack uses; on RabbitMQ its queues are deleted afterwards."""
    queue = f"tensorant-test-{uuid.uuid4().hex[:12]}"
    try:
        yield queue
    finally:
        if amqp_url is not None:
            drop_rabbitmq_queue(queue, amqp_url)


def drop_rabbitmq_queue(queue: str, url: str = AMQP_URL) -> None:
    """Delete a queue and dramatiq's delay and dead-letter queues beside it."""
    import pika

    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = conn.channel()
        for name in (queue, f"{queue}.DQ", f"{queue}.XQ"):
            channel.queue_delete(name)
    finally:
        conn.close()


def require_postgres() -> str:
    """The test database's URL, after a real connection to it."""
    import psycopg

    try:
        psycopg.connect(POSTGRES_URL, connect_timeout=3).close()
    except psycopg.OperationalError as e:
        unavailable(f"PostgreSQL is not reachable at {POSTGRES_URL}: {e}".strip())
    return POSTGRES_URL


@pytest.fixture(scope="session")
def postgres_url() -> str:
    return require_postgres()


def postgres_env(schema: str) -> dict[str, str]:
    """The eventsourcing environment for a private schema in the shared test database."""
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": "test",
        "POSTGRES_HOST": "127.0.0.1",
        "POSTGRES_PORT": "5432",
        "POSTGRES_USER": "postgres",
        "POSTGRES_PASSWORD": "",
        "POSTGRES_SCHEMA": schema,
        "CREATE_TABLE": "y",
    }


def _drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _create_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')


@pytest.fixture(params=["sqlite", "postgres"])
def event_store_env(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The same test body on the embedded SQLite store and on PostgreSQL."""
    if request.param == "sqlite":
        yield {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": str(tmp_path / "events.db"),
        }
        return
    require_service("PostgreSQL", "127.0.0.1", 5432)
    schema = f"t_{uuid.uuid4().hex[:12]}"
    _create_schema(schema)
    try:
        yield postgres_env(schema)
    finally:
        _drop_schema(schema)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The chaos tests start several deployments as processes (workers, followers, a server):
    one of them holds 50-60 of PostgreSQL's 100 connections at its peak, so two side by side
    (or one beside an e2e server) would exhaust them. They run `alone`. Tests marked `gpu` run
    only on the accelerator machine (`-m gpu` or TENSORANT_TEST_GPU=1): elsewhere they are
    deselected, said in the summary, never skipped as if they had run."""
    for item in items:
        if item.nodeid.startswith("tests/chaos/") and not item.get_closest_marker("shares"):
            item.add_marker(pytest.mark.alone)
    wanted = "gpu" in (config.getoption("markexpr", "") or "") or os.environ.get(
        "TENSORANT_TEST_GPU", ""
    ) in ("1", "true", "yes")
    if not wanted:
        gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
        if gpu:
            config.hook.pytest_deselected(items=gpu)
            items[:] = [item for item in items if item.get_closest_marker("gpu") is None]


@pytest.fixture(autouse=True)
def _machine_share(request: pytest.FixtureRequest) -> Iterator[None]:
    """The suite runs in two processes (pytest-xdist). A test marked `alone` compares timings
    within itself (a trial alone and beside zip bombs), which the other process's work would
    skew, or needs most of PostgreSQL's connections (the chaos tests): it waits until no other
    test runs and keeps the others out until it ends. Every other
    test holds a shared lock while it runs; a waiting `alone` test closes a gate first, so the
    other process cannot keep it waiting by starting test after test. One process: no locks."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None:
        yield
        return
    alone = request.node.get_closest_marker("alone") is not None
    base = Path(tempfile.gettempdir()) / f"tensorant-pytest-{run}"
    with open(f"{base}.gate", "a") as gate, open(f"{base}.share", "a") as share:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(share, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(share, fcntl.LOCK_UN)
