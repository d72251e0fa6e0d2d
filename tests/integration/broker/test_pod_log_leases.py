"""The Pod-log follower's lease (a PostgreSQL
session-level advisory lock on a connection of its own) is exclusive across processes, and a
worker killed with SIGKILL frees it, so another worker's next scan takes the run over."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psycopg
import pytest

from adapters.run_locks import PostgresLeases
from tests.conftest import POSTGRES_URL, require_service

pytestmark = pytest.mark.postgres

HOLDER = """
import sys, time
from adapters.run_locks import PostgresLeases
lease = PostgresLeases(sys.argv[1]).try_take(sys.argv[2])
print("held" if lease else "refused", flush=True)
time.sleep(120)
"""


def test_a_lease_is_exclusive_and_a_killed_holder_frees_it() -> None:
    require_service("PostgreSQL", "127.0.0.1", 5432)
    name = f"pod-logs:test-{os.getpid()}-{time.monotonic_ns()}"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, POSTGRES_URL, name],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        leases = PostgresLeases(POSTGRES_URL)
        assert leases.try_take(name) is None  # another worker follows the run
        holder.send_signal(signal.SIGKILL)
        holder.wait(10)
        deadline = time.monotonic() + 15
        lease = None
        while lease is None and time.monotonic() < deadline:
            lease = leases.try_take(name)
            if lease is None:
                time.sleep(0.2)
        assert lease is not None, "the killed worker's lease was not freed"
        assert leases.try_take(name) is None
        lease.release()
        again = leases.try_take(name)
        assert again is not None
        again.release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(5)


def test_a_process_holds_all_its_leases_on_one_connection() -> None:
    """A worker following many runs holds one database session for their leases, not one
    each: PostgreSQL's max_connections bounded the runs followed otherwise."""
    require_service("PostgreSQL", "127.0.0.1", 5432)
    leases = PostgresLeases(POSTGRES_URL)
    names = [f"pod-logs:test-{os.getpid()}-{time.monotonic_ns()}-{i}" for i in range(30)]
    try:
        held = [leases.try_take(n) for n in names]
        assert all(lease is not None for lease in held)
        assert leases.try_take(names[0]) is None  # held already, by this very process
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*), count(DISTINCT pid) FROM pg_locks WHERE locktype = 'advisory'"
                " AND objid IN (SELECT (hashtextextended(n, 11) & 4294967295)::oid"
                " FROM unnest(%s::text[]) AS n)",
                ([f"lease:{n}" for n in names],),
            ).fetchone()
        assert row == (30, 1)
        for lease in held:
            assert lease is not None
            lease.release()
        assert leases.try_take(names[0]) is not None
    finally:
        leases.close()
