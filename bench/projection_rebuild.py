"""Benchmark: rebuilding a view with our projection engine vs eventsourcing's ProjectionRunner.

Run (PostgreSQL at 127.0.0.1:5432, database `test`; not part of the pytest suite):

    uv run python bench/projection_rebuild.py                  # 1,000,000 events
    uv run python bench/projection_rebuild.py --events 200000  # quicker

It writes N events through an eventsourcing Application (a toy aggregate; each save records
`--per-save` events spread over as many aggregates, so consecutive notifications belong to
different aggregates and nearly every event changes a different document), then measures in one
run, over the same notifications:
  (a) raw: reading and decoding every notification in pages (select_notifications + mapper),
      with the same page size as (b)'s batches;
  (b) ours: `Projector.rebuild()` of a per-aggregate counter view (PostgresViewStore), in
      batches of `--batch-size` notifications (default: the engine's rebuild batch size);
  (c) library: `eventsourcing.projection.ProjectionRunner` with an equivalent counter view
      (one upsert + tracking row per transaction), on the first `--library-sample` events only;
      its rate is extrapolated to N.
Everything lives in a fresh schema that is dropped at the end (unless --keep).

The machine may be shared and noisy: run it more than once before reading much into a figure.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, DomainEventProtocol, event
from eventsourcing.persistence import Tracking
from eventsourcing.postgres import PostgresDatastore, PostgresTrackingRecorder
from eventsourcing.projection import Projection, ProjectionRunner
from psycopg.conninfo import conninfo_to_dict
from psycopg.sql import SQL, Identifier

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from projections.store.base import DocKey, ViewBatch
from projections.store.engine import REBUILD_BATCH_SIZE, Projector
from projections.store.postgres import PostgresViewStore


class Meter(Aggregate):
    """A toy aggregate that only counts ticks."""

    class Opened(Aggregate.Created):
        pass

    class Ticked(Aggregate.Event):
        n: int

    @event(Opened)
    def __init__(self) -> None:
        self.n = 0

    @event(Ticked)
    def tick(self, n: int) -> None:
        self.n = n


class BenchApp(Application[uuid.UUID]):
    """The application whose notification log is projected."""


class CounterView:
    """Ours: one document per aggregate counting its events."""

    name = "bench_counter"

    def keys(self, e: DomainEventProtocol[Any]) -> list[DocKey]:
        return [("bench", str(e.originator_id))]

    def apply(self, batch: ViewBatch, e: DomainEventProtocol[Any], position: int) -> None:
        key = str(e.originator_id)
        doc = batch.get("bench", key) or {"events": 0}
        doc["events"] += 1
        doc["last"] = position
        batch.put("bench", key, doc)


class CounterRecorder(PostgresTrackingRecorder):
    """The library's materialised view: the same counter, committed per event with tracking."""

    def __init__(self, datastore: PostgresDatastore, **kwargs: Any) -> None:
        super().__init__(datastore, **kwargs)
        table = SQL("{}.{}").format(
            Identifier(self.datastore.schema), Identifier(f"{self.tracking_table_name}_docs")
        )
        self.sql_create_statements.append(
            SQL("CREATE TABLE IF NOT EXISTS {} (key text PRIMARY KEY, doc jsonb NOT NULL)").format(
                table
            )
        )
        self.upsert = SQL(
            "INSERT INTO {0} (key, doc) VALUES (%s, jsonb_build_object('events', 1, 'last', %s))"
            " ON CONFLICT (key) DO UPDATE SET doc = jsonb_build_object("
            "'events', ({0}.doc->>'events')::bigint + 1, 'last', %s)"
        ).format(table)

    def incr(self, key: str, tracking: Tracking) -> None:
        with self.datastore.transaction(commit=True) as curs:
            n = tracking.notification_id
            curs.execute(self.upsert, (key, n, n), prepare=True)
            self._insert_tracking(curs, tracking)


class LibraryCounter(Projection[CounterRecorder]):
    """The library's projection equivalent to CounterView."""

    name = "libcounter"

    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.incr(str(domain_event.originator_id), tracking)


def app_env(url: str, schema: str) -> dict[str, str]:
    """eventsourcing's POSTGRES_* settings for a URL and schema."""
    p = conninfo_to_dict(url)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": str(p.get("dbname", "test")),
        "POSTGRES_HOST": str(p.get("host", "127.0.0.1")),
        "POSTGRES_PORT": str(p.get("port", "5432")),
        "POSTGRES_USER": str(p.get("user", "postgres")),
        "POSTGRES_PASSWORD": str(p.get("password", "")),
        "POSTGRES_SCHEMA": schema,
        "POSTGRES_POOL_SIZE": "4",
    }


def write_events(app: BenchApp, total: int, per_save: int) -> None:
    """Record `total` events; each save spreads `per_save` events over that many aggregates."""
    meters = [Meter() for _ in range(per_save)]
    written, tick, last_report = 0, 0, time.monotonic()
    started = time.monotonic()
    while written < total:
        take = min(per_save, total - written)
        batch = meters[:take]
        if tick:
            for m in batch:
                m.tick(tick)
        app.save(*batch)
        written += take
        tick += 1
        if time.monotonic() - last_report > 5:
            last_report = time.monotonic()
            print(f"  written {written:,}/{total:,}", flush=True)
    elapsed = time.monotonic() - started
    print(f"wrote {total:,} events in {elapsed:.1f}s ({total / elapsed:,.0f} events/s)")


def measure_raw(app: BenchApp, page: int) -> tuple[int, float]:
    """Read and decode every notification in pages."""
    started = time.monotonic()
    position, count = 0, 0
    mapper = app.mapper
    while True:
        notifications = app.recorder.select_notifications(
            start=position, limit=page, inclusive_of_start=False
        )
        if not notifications:
            break
        for n in notifications:
            mapper.to_domain_event(n)
        count += len(notifications)
        position = notifications[-1].id
    return count, time.monotonic() - started


def measure_ours(app: BenchApp, url: str, schema: str, batch_size: int) -> tuple[int, float]:
    """Rebuild the counter view with our engine."""
    store = PostgresViewStore(url, schema=schema)
    try:
        projector = Projector(
            app, store, CounterView(), batch_size=batch_size, rebuild_batch_size=batch_size
        )
        started = time.monotonic()
        count = projector.rebuild()
        return count, time.monotonic() - started
    finally:
        store.close()


def measure_library(env: dict[str, str], sample: int) -> tuple[int, float]:
    """Run the library's ProjectionRunner until it has tracked the first `sample` events."""
    started = time.monotonic()
    with ProjectionRunner(
        application_class=BenchApp,
        projection_class=LibraryCounter,
        view_class=CounterRecorder,
        env=env,
    ) as runner:
        target = runner.app.recorder.select_notifications(start=sample, limit=1)[0].id
        runner.wait(target, timeout=3600)
        elapsed = time.monotonic() - started
    return sample, elapsed


def _verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--per-save", type=int, default=1000)
    parser.add_argument(
        "--batch-size",
        type=int,
        default=REBUILD_BATCH_SIZE,
        help="notifications per rebuild batch, and per page of the raw read (same pages)",
    )
    parser.add_argument("--library-sample", type=int, default=20_000)
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--keep", action="store_true", help="keep the schema afterwards")
    args = parser.parse_args()

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(args.database_url, autocommit=True) as conn:
        conn.execute(SQL("CREATE SCHEMA {}").format(Identifier(schema)))
    env = app_env(args.database_url, schema)
    app = BenchApp(env=env)
    try:
        print(f"schema {schema}: writing {args.events:,} events")
        write_events(app, args.events, args.per_save)

        raw_n, raw_s = measure_raw(app, args.batch_size)
        ours_n, ours_s = measure_ours(app, args.database_url, schema, args.batch_size)
        sample = min(args.library_sample, args.events)
        lib_n, lib_s = measure_library(env, sample)

        raw, ours, lib = raw_n / raw_s, ours_n / ours_s, lib_n / lib_s
        print()
        print(f"(a) raw read+decode : {raw_n:>9,} events in {raw_s:8.2f}s = {raw:>10,.0f} ev/s")
        print(f"(b) ours (rebuild)  : {ours_n:>9,} events in {ours_s:8.2f}s = {ours:>10,.0f} ev/s")
        print(
            f"(c) library runner  : {lib_n:>9,} events in {lib_s:8.2f}s = {lib:>10,.0f} ev/s"
            f"  (sample of the first {lib_n:,}; {args.events:,} would take"
            f" ~{args.events / lib:,.0f}s extrapolated)"
        )
        vs_lib, vs_raw = ours / lib, ours / raw
        print(f"pages/batches of {args.batch_size:,} notifications (raw and ours alike)")
        print(f"ours / library = {vs_lib:6.1f}x  target >= 20x   {_verdict(vs_lib >= 20)}")
        print(f"ours / raw     = {vs_raw:6.2f}   target >= 0.5   {_verdict(vs_raw >= 0.5)}")
        assert ours_n == args.events, (ours_n, args.events)
    finally:
        app.close()
        if not args.keep:
            with psycopg.connect(args.database_url, autocommit=True) as conn:
                conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(schema)))


if __name__ == "__main__":
    main()
