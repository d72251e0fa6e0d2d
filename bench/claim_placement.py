"""Benchmark: where a trainer report's claim costs least on the embedded SQLite default.

    uv run python bench/claim_placement.py                # 3,000 reports per placement
    uv run python bench/claim_placement.py --calls 500    # a quick run

A trainer's first report on a run claimed its `(boot, seq)` with two state rows (when anything
last arrived, the progress shown) and recorded the run's event (TrainingStarted).
compares a report with the event's raw append, and on SQLite the claim was most of the gap
(`bench/command_throughput.py`). No placement below saved enough (at most ~20 us of ~75), so
that report is now claimed by its event alone (`TrainerCallbacks._progress`); this bench stays
as the record of why, and as what every later report's claim costs. This measures, on plain
sqlite3 connections with the stores' own tables, pragmas and statements (no application code),
each place the claim could go:

  event      the baseline: the event alone (BEGIN, INSERT, COMMIT; WAL, synchronous=FULL,
             as eventsourcing's recorder);
  apart      what `adapters.logstore.SQLiteLogStore.claim` does today: its own transaction in
             the report store's file (WAL, synchronous=NORMAL; BEGIN IMMEDIATE, the run's
             version read from the event file attached read-only, claim, state upsert,
             COMMIT), then the event;
  attached   the claim's rows written in the event's transaction, the report store's file
             attached to the event store's connection (one COMMIT over two files);
  same file  the claim's tables inside the event file, written in the event's transaction.

Placements are interleaved call by call (each sees the same moment of the disk and CPU), each
on fresh rows (a run id per call), `--calls` times. Reported: wall p50 and mean, CPU (this
thread's, kernel included) mean, what each adds to the event alone, and event ÷ placement: the
ratio a report would reach against the raw append if nothing else differed.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

# The stores' tables: eventsourcing's SQLite application recorder, adapters.logstore's claims
# and state.
EVENTS = (
    "CREATE TABLE IF NOT EXISTS stored_events (originator_id TEXT, originator_version INTEGER,"
    " topic TEXT, state BLOB, PRIMARY KEY (originator_id, originator_version))"
)
CLAIMS = (
    "CREATE TABLE IF NOT EXISTS {s}.run_report_claims (run_id TEXT NOT NULL, boot TEXT NOT NULL,"
    " seq INTEGER NOT NULL, via TEXT NOT NULL, PRIMARY KEY (run_id, boot, seq)) WITHOUT ROWID"
)
STATE = (
    "CREATE TABLE IF NOT EXISTS {s}.run_report_state (run_id TEXT NOT NULL, name TEXT NOT NULL,"
    " body TEXT NOT NULL, PRIMARY KEY (run_id, name)) WITHOUT ROWID"
)
INSERT_EVENT = "INSERT INTO stored_events VALUES (?, ?, ?, ?)"
CLAIM = "INSERT OR IGNORE INTO {s}.run_report_claims (run_id, boot, seq, via) VALUES (?, ?, ?, ?)"
UPSERT = (
    "INSERT INTO {s}.run_report_state AS s (run_id, name, body) VALUES (?, ?, ?), (?, ?, ?)"
    " ON CONFLICT (run_id, name) DO UPDATE SET body = excluded.body"
)
VERSION = "SELECT max(originator_version) FROM log.stored_events WHERE originator_id = ?"
# What a first report stores (sizes as the application's).
TOPIC = "tensorant.run.TrainingStarted"
EVENT_STATE = (
    b'{"timestamp":{"_type_":"datetime_iso","_data_":"2026-12-06T19:00:00.123456+00:00"},'
    b'"actor":"trainer","at":{"_type_":"datetime_iso","_data_":"2026-12-06T19:00:00.123+00:00"}}'
)
SEEN = '{"at":"2026-12-06T19:00:00.123456+00:00","via":"callback"}'
PROGRESS = (
    '{"boot":"b00t0000aaaa1111","seq":1,"time":"2026-12-01T10:00:00.000Z","phase":"training",'
    '"step":1,"total_steps":120,"loss":2.3125,"learning_rate":0.0002,"tokens_per_s":1843.5,'
    '"via":"callback","at":"2026-12-06T19:00:00.123456+00:00"}'
)
BOOT = "b00t0000aaaa1111"


def connect(path: Path, synchronous: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path.as_uri(), uri=True, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    return conn


class Stores:
    """An event file and a report file as a deployment has them, plus an event file holding
    the claim's tables (`same file`) and one holding the report file attached (`attached`)."""

    def __init__(self, folder: Path) -> None:
        self.events = connect(folder / "events.db", "FULL")
        self.events.execute(EVENTS)
        self.reports = connect(folder / "reports.db", "NORMAL")
        for table in (CLAIMS, STATE):
            self.reports.execute(table.format(s="main"))
        self.reports.execute(
            "ATTACH DATABASE ? AS log", ((folder / "events.db").as_uri() + "?mode=ro",)
        )
        self.joined = connect(folder / "joined.db", "FULL")
        self.joined.execute(EVENTS)
        self.joined.execute("ATTACH DATABASE ? AS along", ((folder / "along.db").as_uri(),))
        self.joined.execute("PRAGMA along.journal_mode=WAL")
        self.joined.execute("PRAGMA along.synchronous=NORMAL")
        self.single = connect(folder / "single.db", "FULL")
        self.single.execute(EVENTS)
        for conn, schema in ((self.joined, "along"), (self.single, "main")):
            for table in (CLAIMS, STATE):
                conn.execute(table.format(s=schema))

    def close(self) -> None:
        for conn in (self.events, self.reports, self.joined, self.single):
            conn.close()


def _event(conn: sqlite3.Connection, run: str, claim_in: str | None = None) -> None:
    conn.execute("BEGIN")
    conn.execute(INSERT_EVENT, (run, 1, TOPIC, EVENT_STATE))
    if claim_in is not None:
        _claim_rows(conn, run, claim_in)
    conn.execute("COMMIT")


def _claim_rows(conn: sqlite3.Connection, run: str, schema: str) -> None:
    if conn.execute(CLAIM.format(s=schema), (run, BOOT, 1, "callback")).rowcount != 1:
        raise AssertionError("a fresh run's claim was taken")
    conn.execute(UPSERT.format(s=schema), (run, "seen", SEEN, run, "progress", PROGRESS))


def placements(stores: Stores) -> dict[str, Callable[[str], None]]:
    def event(run: str) -> None:
        _event(stores.events, run)

    def apart(run: str) -> None:
        conn = stores.reports
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(VERSION, (run,)).fetchone()
        _claim_rows(conn, run, "main")
        conn.execute("COMMIT")
        _event(stores.events, run)

    def attached(run: str) -> None:
        _event(stores.joined, run, "along")

    def same_file(run: str) -> None:
        _event(stores.single, run, "main")

    return {"event": event, "apart": apart, "attached": attached, "same file": same_file}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=3000, help="reports per placement")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench_claim_") as folder:
        stores = Stores(Path(folder))
        try:
            calls = placements(stores)
            names = list(calls)
            wall: dict[str, list[float]] = {name: [] for name in names}
            cpu: dict[str, list[float]] = {name: [] for name in names}
            for i in range(args.calls):
                for j in range(len(names)):  # a rotating order: none always follows another
                    name = names[(i + j) % len(names)]
                    run = uuid.uuid4().hex
                    c, t = time.thread_time(), time.perf_counter()
                    calls[name](run)
                    wall[name].append(time.perf_counter() - t)
                    cpu[name].append(time.thread_time() - c)
        finally:
            stores.close()
    base_mean = statistics.mean(wall["event"])
    base_p50 = statistics.median(wall["event"])
    print(f"{args.calls:,} reports per placement, interleaved; µs")
    print(
        f"{'placement':<10} {'p50':>6} {'mean':>6} {'cpu':>6} {'+p50':>6} {'+mean':>6} {'ratio':>6}"
    )
    for name in names:
        p50, mean = statistics.median(wall[name]) * 1e6, statistics.mean(wall[name]) * 1e6
        print(
            f"{name:<10} {p50:6.0f} {mean:6.0f} {statistics.mean(cpu[name]) * 1e6:6.0f}"
            f" {p50 - base_p50 * 1e6:6.0f} {mean - base_mean * 1e6:6.0f}"
            f" {base_mean * 1e6 / mean:6.2f}"
        )


if __name__ == "__main__":
    main()
