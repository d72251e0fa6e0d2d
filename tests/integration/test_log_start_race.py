"""Processes that start together each create their tables: none of them may fail for it (a
worker died at start with PostgreSQL's "tuple concurrently updated" when two started at once,
and a CI run later saw "relation already exists" from the loser of an IF NOT EXISTS race)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from adapters.broker_dedupe import PostgresDedupe
from adapters.logstore import PostgresLogStore
from adapters.serving_meter import PostgresServingMeter
from adapters.vault import SqlSecretVault
from application.log import TensorantLog
from tests.conftest import _create_schema, _drop_schema, postgres_env

pytestmark = pytest.mark.postgres


def _open_together(n: int, open_one: Callable[[], Any]) -> tuple[list[Any], list[BaseException]]:
    start = threading.Barrier(n)
    opened: list[Any] = []
    errors: list[BaseException] = []

    def run() -> None:
        start.wait()
        try:
            opened.append(open_one())
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return opened, errors


def _vault(postgres_url: str, schema: str) -> SqlSecretVault:
    vault = SqlSecretVault.postgres(f"{postgres_url}?options=-csearch_path%3D{schema}", b"k" * 32)
    vault.put("org", "name", "value")  # creates the tables on first use
    return vault


OPENERS: dict[str, Callable[[str, str], Any]] = {
    "event log": lambda url, schema: TensorantLog(postgres_env(schema)),
    "log store": lambda url, schema: PostgresLogStore(url, schema=schema),
    "broker dedupe": lambda url, schema: PostgresDedupe(url, schema=schema),
    "vault": _vault,
    "serving meter": lambda url, schema: PostgresServingMeter(url, schema=schema),
}


# Rounds per store: without its lock, the event log lost the race in about 1 round of 12; the
# others in 7 to 12 of 12.
ROUNDS = {"event log": 12, "log store": 3, "broker dedupe": 3, "vault": 3, "serving meter": 1}


@pytest.mark.parametrize(
    ("store", "round_"), [(store, r) for store, n in ROUNDS.items() for r in range(n)]
)
def test_stores_opened_at_the_same_moment_on_a_fresh_schema_all_open(
    postgres_url: str, store: str, round_: int
) -> None:
    schema = f"race_{uuid.uuid4().hex[:10]}"
    _create_schema(schema)
    try:
        opened, errors = _open_together(4, lambda: OPENERS[store](postgres_url, schema))
        assert errors == [], errors
        assert len(opened) == 4
        for each in opened:
            each.close()
    finally:
        _drop_schema(schema)
