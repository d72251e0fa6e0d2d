"""Run locks (`PostgresRunLocks`): exclusive per run across processes and threads, and every
holder of a process on one database connection (K2 at scale: a blocking lock per pooled
connection made reconcile threads wait 30 s for a connection, then fail)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import psycopg
import pytest

from adapters.run_locks import PostgresRunLocks
from tests.conftest import POSTGRES_URL, require_service

pytestmark = pytest.mark.postgres

HOLDER = """
import sys
from adapters.run_locks import PostgresRunLocks
with PostgresRunLocks(sys.argv[1]).hold(sys.argv[2]):
    print("held", flush=True)
    sys.stdin.read()  # until the test closes our stdin
"""


def _holders(names: list[str]) -> tuple[int, int]:
    with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*), count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory'"
            " AND granted AND objid IN (SELECT (hashtextextended(n, 7) & 4294967295)::oid"
            " FROM unnest(%s::text[]) AS n)",
            ([f"run:{n}" for n in names],),
        ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1])


def test_a_process_holds_many_runs_locks_on_one_connection() -> None:
    require_service("PostgreSQL", "127.0.0.1", 5432)
    locks = PostgresRunLocks(POSTGRES_URL, max_size=2)
    names = [f"test-{os.getpid()}-{time.monotonic_ns()}-{i}" for i in range(12)]
    all_held, done = threading.Barrier(len(names) + 1), threading.Event()

    def drive(name: str) -> None:
        with locks.hold(name):
            all_held.wait(10)
            done.wait(10)

    threads = [threading.Thread(target=drive, args=(n,)) for n in names]
    try:
        for t in threads:
            t.start()
        all_held.wait(10)  # twelve drives at once, where the pool had room for two
        assert _holders(names) == (12, 1)
    finally:
        done.set()
        for t in threads:
            t.join(10)
        locks.close()
    assert _holders(names) == (0, 0)


def test_a_runs_lock_excludes_another_process_and_another_thread() -> None:
    require_service("PostgreSQL", "127.0.0.1", 5432)
    run = f"test-{os.getpid()}-{time.monotonic_ns()}"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, POSTGRES_URL, run],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    locks = PostgresRunLocks(POSTGRES_URL)
    order: list[str] = []
    try:
        assert holder.stdout is not None and holder.stdin is not None
        assert holder.stdout.readline().strip() == "held"
        first_in = threading.Event()

        def drive(who: str, hold_s: float) -> None:
            with locks.hold(run):
                order.append(f"{who} in")
                first_in.set()
                time.sleep(hold_s)  # fixed-sleep-ok: the other thread must wait this out
                order.append(f"{who} out")

        first = threading.Thread(target=drive, args=("first", 0.3))
        first.start()
        assert not first_in.wait(0.5), "took a run another process holds"
        second = threading.Thread(target=drive, args=("second", 0.0))
        second.start()
        holder.stdin.close()  # the other process's drive ends
        holder.wait(10)
        first.join(10)
        second.join(10)
        assert order == ["first in", "first out", "second in", "second out"]
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(5)
        locks.close()
