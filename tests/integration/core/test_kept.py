"""`Kept`: aggregates a service keeps between its own commands (the trainer's reports, the
reactor's drives), handed to one caller at a time and reused only while the log holds no newer
version of them, whoever wrote it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest

from adapters.event_versions import log_reads
from application.log import Kept, TensorantLog
from domain.errors import NotFound
from domain.project import Project

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SHA = "0" * 64


@pytest.fixture(params=["one statement", "library reads"])
def two_logs(
    request: pytest.FixtureRequest, event_store_env: dict[str, Any]
) -> Iterator[tuple[TensorantLog, TensorantLog]]:
    """Two processes' logs on one store, through the adapter's reads and the library's."""
    reads = log_reads if request.param == "one statement" else None
    env = {**event_store_env, "CREATE_TABLE": "y"}
    first, second = TensorantLog(env, reads=reads), TensorantLog(env, reads=reads)
    yield first, second
    first.close()
    second.close()


def _register(project: Project, name: str) -> None:
    project.register_dataset_version(
        str(uuid4()), name, "1", f"datasets/{name}.jsonl", 10, 1, SHA, "user:o", T0
    )


def test_a_kept_aggregate_is_handed_out_again_until_another_process_changes_it(
    two_logs: tuple[TensorantLog, TensorantLog],
) -> None:
    api, worker = two_logs
    project = Project.create("org-a", "bot", "user:o", T0)
    api.save_all(project)
    kept = Kept(api, Project)
    first = kept.take(str(project.id))
    assert first is not project and first.version == project.version  # loaded: nothing kept
    kept.give_back(first)
    again = kept.take(str(project.id))
    assert again is first  # its version is the log's: reused, not read and decoded again
    assert kept.take(str(project.id)) is not first  # taken out: one caller at a time
    kept.give_back(again)
    changed = worker.project("org-a", str(project.id))
    _register(changed, "chats")
    worker.save_all(changed)
    now = kept.take(str(project.id))
    assert now is not first and now.version == changed.version
    assert [d["name"] for d in now.datasets.values()] == ["chats"]


def test_only_an_aggregate_that_is_what_the_log_holds_is_kept(
    two_logs: tuple[TensorantLog, TensorantLog],
) -> None:
    api, _ = two_logs
    project = Project.create("org-a", "bot", "user:o", T0)
    api.save_all(project)
    kept = Kept(api, Project)
    taken = kept.take(str(project.id))
    _register(taken, "unsaved")
    kept.give_back(taken)  # changed, not saved: refused
    fresh = kept.take(str(project.id))
    assert fresh is not taken and not fresh.datasets
    _register(fresh, "saved")
    api.save_all(fresh)
    kept.give_back(fresh)  # saved: what the log holds
    assert kept.take(str(project.id)) is fresh


def test_taking_what_does_not_exist_is_not_found_as_load_says_it(
    two_logs: tuple[TensorantLog, TensorantLog],
) -> None:
    api, _ = two_logs
    kept = Kept(api, Project)
    for missing in (str(uuid4()), "not-a-uuid"):
        with pytest.raises(NotFound):
            kept.take(missing)
