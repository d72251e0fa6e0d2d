"""Rigs on PostgreSQL with a real RabbitMQ or Redis: the relay produces, `run_worker` consumes.

Each test gets its own queue name (parallel suites must not steal each other's messages) and
its own PostgreSQL schema; both are deleted afterwards.
"""

from __future__ import annotations

import contextlib
import os
import threading
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg.sql import SQL, Identifier

from adapters.broker import make_broker, register_actors, run_worker
from adapters.broker_dedupe import PostgresDedupe
from projections.store.postgres import PostgresViewStore
from tests.conftest import (
    AMQP_URL,
    POSTGRES_URL,
    drop_rabbitmq_queue,
    postgres_env,
    require_service,
)
from tests.unit.broker import scenarios as s

REDIS_URL = os.environ.get("TENSORANT_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def _delete_redis_keys(queue: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=f"dramatiq:*{queue}*"))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@pytest.fixture
def schema() -> Iterator[str]:
    require_service("PostgreSQL", "127.0.0.1", 5432)
    name = f"tbrk_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(SQL("CREATE SCHEMA {}").format(Identifier(name)))
    yield name
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(name)))


@pytest.fixture(
    params=[
        pytest.param("amqp", marks=[pytest.mark.rabbitmq, pytest.mark.postgres]),
        pytest.param("redis", marks=[pytest.mark.redis, pytest.mark.postgres]),
    ]
)
def rig(request: pytest.FixtureRequest, schema: str) -> Iterator[s.Rig]:
    if request.param == "amqp":
        require_service("RabbitMQ", "127.0.0.1", 5672)
        url, cleanup = AMQP_URL, drop_rabbitmq_queue
    else:
        require_service("Redis", "127.0.0.1", 6379)
        url, cleanup = REDIS_URL, _delete_redis_keys
    queue = f"tensorant_test_{uuid.uuid4().hex[:10]}"

    app = s.EventsApp(env={**postgres_env(schema), "POSTGRES_POOL_SIZE": "4"})
    store = PostgresViewStore(POSTGRES_URL, schema=schema, max_size=4)
    producer = register_actors(make_broker(url), s.DriveLog(), queue_name=queue)
    log = s.DriveLog()
    shared = PostgresDedupe(POSTGRES_URL, schema=schema)
    dedupe = s.CountingDedupe(shared)
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def start_consumer() -> None:
        # What `tensorant worker` runs, minus the signal handlers (not on the main thread).
        t = threading.Thread(
            target=run_worker,
            args=(url, log),
            kwargs={"dedupe": dedupe, "queue_name": queue, "threads": 2, "stop": stop},
            daemon=True,
        )
        t.start()
        threads.append(t)

    rig = s.Rig(app, store, producer, dedupe, log, start_consumer)
    try:
        yield rig
    finally:
        for relay in rig.relays:
            relay.stop()
        stop.set()
        for t in threads:
            t.join(15)
        assert not any(t.is_alive() for t in threads), "the worker did not stop"
        with contextlib.suppress(Exception):
            producer.purge()
        producer.broker.close()
        cleanup(queue)
        shared.close()
        store.close()
        app.close()
