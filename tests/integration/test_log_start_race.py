"""Processes that start together each create the event tables: none of them may fail for it
(a worker died at start with PostgreSQL's "tuple concurrently updated" when two started at once)."""

from __future__ import annotations

import threading
import uuid

import pytest

from application.log import TensorantLog
from tests.conftest import _create_schema, _drop_schema, postgres_env

pytestmark = pytest.mark.postgres


def _open_together(schema: str, n: int) -> tuple[list[TensorantLog], list[BaseException]]:
    start = threading.Barrier(n)
    logs: list[TensorantLog] = []
    errors: list[BaseException] = []

    def open_log() -> None:
        start.wait()
        try:
            logs.append(TensorantLog(postgres_env(schema)))
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=open_log) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return logs, errors


@pytest.mark.parametrize("round_", range(12))
def test_logs_opened_at_the_same_moment_on_a_fresh_schema_all_open(
    postgres_url: str, round_: int
) -> None:
    schema = f"race_{uuid.uuid4().hex[:10]}"
    _create_schema(schema)
    try:
        logs, errors = _open_together(schema, 4)
        assert errors == [], errors
        assert len(logs) == 4
        for log in logs:
            log.close()
    finally:
        _drop_schema(schema)
