"""A realistic Tensorant event log of N events in a PostgreSQL schema, for the rebuild benchmark.

    uv run python bench/event_log_generator.py --events 1000000 --schema bench_log_1m
    uv run python bench/event_log_generator.py --events 20000            # a quick one

Realistic because the real code writes it: one history is driven through the service layer
(`application.services` on the test fakes, `tests/fixtures/legacy_log/write_log.write_history`):
organizations with members, connections (connect, rotate, fail, disconnect), storage (volumes,
custom S3, resize), projects and dataset versions, runs through every lifecycle (drafts, launch
refusals, capacity failures, runtime limits, stop/resume, recovery, cleanup with failing
terminations, exports), billing reconciliation ticks; every event class at least once
(139 events). That history is the template: it is copied until N events are recorded, each copy
with fresh ids (every UUID in ids and payloads, user token hashes and Pod ids are replaced, so
copies are separate organizations, runs and Pods), appended with the eventsourcing recorder in
the `tensorant_events` table `entrypoints.bootstrap` uses. Copies follow one another (events of
one copy are consecutive) and share the template's timestamps.

Generating 1,000,000 events takes minutes on a loaded two-core machine: generate once into a
named schema (`--schema`) and let `bench/projection_rebuild.py --schema` reuse it; an existing
schema with at least N events is left as it is.
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from eventsourcing.persistence import StoredEvent
from psycopg.sql import SQL, Identifier

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from application.log import TensorantLog

UUID_RE = rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
HEX_RE = rb"\b[0-9a-f]{64}\b|\b[0-9a-f]{32}\b"
POD_RE = rb'"pod_id":"([^"]+)"'


def pg_env(url: str, schema: str) -> dict[str, str]:
    p = psycopg.conninfo.conninfo_to_dict(url)
    return {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": str(p.get("dbname", "test")),
        "POSTGRES_HOST": str(p.get("host", "127.0.0.1")),
        "POSTGRES_PORT": str(p.get("port", "5432")),
        "POSTGRES_USER": str(p.get("user", "postgres")),
        "POSTGRES_PASSWORD": str(p.get("password", "")),
        "POSTGRES_SCHEMA": schema,
        "POSTGRES_POOL_SIZE": "4",
        "CREATE_TABLE": "y",
    }


def template() -> list[tuple[uuid.UUID, int, str, bytes]]:
    """One history written by the service layer (SQLite, a temporary file), in log order."""
    from tests.fixtures.legacy_log.write_log import write_history

    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "events.sqlite"
        write_history(db).close()
        conn = sqlite3.connect(db)
        rows = conn.execute(
            "SELECT originator_id, originator_version, topic, state FROM stored_events "
            "ORDER BY rowid"
        ).fetchall()
        conn.close()
    return [(uuid.UUID(o), int(v), t, bytes(s)) for o, v, t, s in rows]


class Copier:
    """Copies of the template with every identifier replaced by a fresh one per copy."""

    def __init__(self, events: list[tuple[uuid.UUID, int, str, bytes]]) -> None:
        self.events = events
        tokens: set[bytes] = set()
        for oid, _, _, state in events:
            tokens.add(str(oid).encode())
            tokens.update(re.findall(UUID_RE, state))
            tokens.update(re.findall(HEX_RE, state))
            tokens.update(re.findall(POD_RE, state))
        tokens.update(uuid.UUID(t.decode()).hex.encode() for t in list(tokens) if len(t) == 36)
        self.tokens = sorted(tokens, key=len, reverse=True)
        self.pattern = re.compile(b"|".join(re.escape(t) for t in self.tokens))

    def copy(self) -> list[StoredEvent]:
        fresh: dict[bytes, bytes] = {}
        for t in self.tokens:
            if t in fresh:
                continue
            if len(t) == 36:
                u = uuid.uuid4()
                fresh[t] = str(u).encode()
                fresh[uuid.UUID(t.decode()).hex.encode()] = u.hex.encode()
            elif len(t) in (32, 64):
                fresh[t] = (uuid.uuid4().hex * 2)[: len(t)].encode()
            else:  # a Pod id
                fresh[t] = uuid.uuid4().hex[: len(t)].encode()

        def sub(m: re.Match[bytes]) -> bytes:
            return fresh[m.group(0)]

        return [
            StoredEvent(
                originator_id=uuid.UUID(fresh[str(oid).encode()].decode()),
                originator_version=version,
                topic=topic,
                state=self.pattern.sub(sub, state),
            )
            for oid, version, topic, state in self.events
        ]


def count_events(url: str, schema: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM information_schema.tables "
            "WHERE table_schema = %s AND table_name = 'tensorant_events'",
            (schema,),
        ).fetchone()
        if not row or not row[0]:
            return 0
        found = conn.execute(
            SQL("SELECT count(*) FROM {}.tensorant_events").format(Identifier(schema))
        ).fetchone()
        return int(found[0]) if found else 0


def generate(url: str, schema: str, total: int, copies_per_insert: int = 20) -> int:
    """Make sure `schema` holds at least `total` events; returns how many it holds."""
    have = count_events(url, schema)
    if have >= total:
        print(f"schema {schema}: {have:,} events already, reused")
        return have
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SQL("CREATE SCHEMA IF NOT EXISTS {}").format(Identifier(schema)))
    started = time.monotonic()
    copier = Copier(template())
    log = TensorantLog(env=pg_env(url, schema))
    try:
        written, last = have, time.monotonic()
        while written < total:
            batch: list[StoredEvent] = []
            for _ in range(copies_per_insert):
                batch.extend(copier.copy())
            log.recorder.insert_events(batch)
            written += len(batch)
            if time.monotonic() - last > 10:
                last = time.monotonic()
                print(f"  {written:,}/{total:,} events", flush=True)
    finally:
        log.close()
    elapsed = time.monotonic() - started
    print(f"schema {schema}: {written:,} events in {elapsed:.0f}s")
    return written


def main(argv: list[str] | None = None) -> Any:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--schema", default="bench_log")
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args(argv)
    return generate(args.database_url, args.schema, args.events)


if __name__ == "__main__":
    main()
