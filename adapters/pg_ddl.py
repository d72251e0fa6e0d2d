"""Creating tables when several processes start at once (a server and two workers).

PostgreSQL's `CREATE ... IF NOT EXISTS` is not safe against a concurrent twin: the loser can
get "relation already exists", a duplicate key on a catalog index, or "tuple concurrently
updated", and a worker died at start so in a CI run. The stores below this package create their
tables inside a transaction that first takes one advisory lock, so first starts take turns.
"""

from __future__ import annotations

from typing import Any

# One key for every table the adapters create (any schema): the DDL is short and rare.
DDL_LOCK_KEY = 0x7465_6E73_6464_6C00  # "tensddl\0"


def take_ddl_lock(execute: Any) -> None:
    """Hold the DDL lock until the caller's transaction ends (it must be in one: under
    autocommit the lock would end with this statement)."""
    execute(f"SELECT pg_advisory_xact_lock({DDL_LOCK_KEY})")
