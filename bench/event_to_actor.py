"""Benchmark: time from a Run event's commit to its `drive_run` actor starting, NOTIFY vs polling.

Run (PostgreSQL at 127.0.0.1:5432, database `test`; not part of the pytest suite):

    uv run python bench/event_to_actor.py                                   # in-process broker
    uv run python bench/event_to_actor.py --broker amqp://guest:guest@127.0.0.1:5672/%2F
    uv run python bench/event_to_actor.py --events 500 --poll-interval 0.5

In one run, for each mode, it commits `--events` Run events one save at a time (random gaps of
0..2x`--gap-ms`, so commits do not line up with the poll), with the outbox relay and a worker
running, and records commit -> actor start for every event:
  notify: the relay as deployed (`projections.relay.Relay`: `Projector.run_forever`, woken by the
          event store's PostgreSQL NOTIFY, `--poll-interval` only as a safety net);
  poll:   the same projector in a plain loop that sleeps `--poll-interval` between catch-ups.
Each mode gets a fresh schema (dropped at the end) and a fresh queue (deleted at the end).
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.application import Application
from psycopg.conninfo import conninfo_to_dict
from psycopg.sql import SQL, Identifier

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from adapters.broker import EmbeddedWorker, is_embedded, make_broker, register_actors
from domain.run import Run
from domain.run_config import RunConfig
from projections.relay import OutboxRelay, Relay
from projections.store.engine import Projector
from projections.store.postgres import PostgresViewStore

CONFIG = RunConfig(
    project_id="p1",
    dataset_version_id="d1",
    kind="trial",
    base_model="Qwen/Qwen2.5-0.5B-Instruct",
    gpu_type_id="NVIDIA GeForce RTX 4090",
    gpu_count=1,
    price_limit_per_hour=Decimal("1.00"),
    max_runtime_minutes=30,
)


class BenchApp(Application[UUID]):
    name = "bench"


class Clocked:
    """The actor's stand-in for `drive_run`: notes when each run's actor started."""

    def __init__(self, expected: int) -> None:
        self.started: dict[str, float] = {}
        self.expected = expected
        self.done = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, run_id: str) -> None:
        now = time.perf_counter()
        with self._lock:
            self.started.setdefault(run_id, now)
            if len(self.started) >= self.expected:
                self.done.set()


def app_env(url: str, schema: str) -> dict[str, str]:
    p = conninfo_to_dict(url)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": str(p.get("dbname", "test")),
        "POSTGRES_HOST": str(p.get("host", "127.0.0.1")),
        "POSTGRES_PORT": str(p.get("port", "5432")),
        "POSTGRES_USER": str(p.get("user", "postgres")),
        "POSTGRES_PASSWORD": str(p.get("password", "")),
        "POSTGRES_SCHEMA": schema,
        "CREATE_TABLE": "y",
    }


def polling_loop(projector: Projector, interval: float) -> tuple[Callable[[], None], Any]:
    """Start a plain poll loop; returns (stop, thread)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            projector.run_once()
            stop.wait(interval)

    t = threading.Thread(target=loop, name="relay:poll", daemon=True)
    t.start()
    return stop.set, t


def delete_queue(broker_url: str, queue: str) -> None:
    if broker_url.startswith("amqp"):
        import pika

        conn = pika.BlockingConnection(pika.URLParameters(broker_url))
        for name in (queue, f"{queue}.DQ", f"{queue}.XQ"):
            conn.channel().queue_delete(name)
        conn.close()
    elif broker_url.startswith("redis"):
        import redis

        client = redis.Redis.from_url(broker_url)
        keys = list(client.scan_iter(match=f"dramatiq:*{queue}*"))
        if keys:
            client.delete(*keys)
        client.close()


def measure(mode: str, args: argparse.Namespace) -> list[float]:
    """Commit `args.events` Run events and return commit->actor-start latencies in ms."""
    schema = f"bench_e2a_{uuid.uuid4().hex[:8]}"
    queue = f"tensorant_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.database_url, autocommit=True) as conn:
        conn.execute(SQL("CREATE SCHEMA {}").format(Identifier(schema)))
    app = BenchApp(env=app_env(args.database_url, schema))
    store = PostgresViewStore(args.database_url, schema=schema, max_size=2)
    clocked = Clocked(args.events)
    actors = register_actors(make_broker(args.broker), clocked, queue_name=queue)
    worker = EmbeddedWorker(actors, threads=8, worker_timeout=100)
    committed: dict[str, float] = {}
    stop_relay: Callable[[], None]
    relay: Relay | None = None
    try:
        worker.start()
        if mode == "notify":
            relay = Relay(app, store, actors, poll_interval=args.poll_interval)
            relay.start()
            stop_relay = relay.stop
        else:
            projector = Projector(app, store, OutboxRelay(actors))
            stop_poll, thread = polling_loop(projector, args.poll_interval)

            def stop_relay() -> None:
                stop_poll()
                thread.join(10)

        time.sleep(0.3)  # let LISTEN and consumers settle
        rng = random.Random(7)
        at = datetime(2026, 1, 5, tzinfo=UTC)
        for _ in range(args.events):
            run = Run.draft("org-bench", CONFIG, "bench", at)
            app.save(run)
            committed[str(run.id)] = time.perf_counter()
            time.sleep(rng.uniform(0, 2 * args.gap_ms / 1000))
        if not clocked.done.wait(args.poll_interval * 4 + 30):
            print(f"{mode}: only {len(clocked.started)}/{args.events} actors started")
        stop_relay()
    finally:
        worker.stop()
        actors.broker.close()
        if not is_embedded(args.broker):
            delete_queue(args.broker, queue)
        store.close()
        app.close()
        with psycopg.connect(args.database_url, autocommit=True) as conn:
            conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(schema)))
    return [(clocked.started[r] - t) * 1000 for r, t in committed.items() if r in clocked.started]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=300)
    parser.add_argument("--gap-ms", type=float, default=10.0, help="mean gap between commits")
    parser.add_argument("--poll-interval", type=float, default=0.5)
    parser.add_argument("--broker", default=None, help="amqp:// or redis://; default in-process")
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()

    results = {mode: measure(mode, args) for mode in ("notify", "poll")}
    broker = "in-process" if is_embedded(args.broker) else args.broker.split(":", 1)[0]
    print(
        f"\ncommit -> actor start, {args.events} Run events, PostgreSQL, {broker} broker, "
        f"poll interval {args.poll_interval}s"
    )
    print(f"{'mode':<8}{'n':>6}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}{'mean ms':>10}")
    for mode, lat in results.items():
        print(
            f"{mode:<8}{len(lat):>6}{pct(lat, 50):>10.1f}{pct(lat, 99):>10.1f}"
            f"{max(lat):>10.1f}{statistics.fmean(lat):>10.1f}"
        )
    n, p = results["notify"], results["poll"]
    print(
        f"poll/notify ratio: p50 {pct(p, 50) / pct(n, 50):.1f}x, p99 {pct(p, 99) / pct(n, 99):.1f}x"
    )


if __name__ == "__main__":
    main()
