"""`TensorantLog.peek`: aggregates read, not changed, asked for in one read of the log (a
draft's checks). A process keeps what it peeked and reads an aggregate again only
when the log holds a newer version, whoever wrote it."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest

from adapters.event_versions import log_reads
from application.log import TensorantLog
from domain.connection import Connection
from domain.project import Project

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
SHA = "0" * 64


@pytest.fixture(params=["one statement", "per aggregate"])
def two_logs(
    request: pytest.FixtureRequest, event_store_env: dict[str, Any]
) -> Iterator[tuple[TensorantLog, TensorantLog]]:
    """Two processes' logs on one store: `peek` through the adapter's one-statement reader
    and through the library's reads (a recorder the adapter does not know)."""
    reader = log_reads if request.param == "one statement" else None
    env = {**event_store_env, "CREATE_TABLE": "y"}
    first = TensorantLog(env, reads=reader)
    second = TensorantLog(env, reads=reader)
    yield first, second
    first.close()
    second.close()


def _register(project: Project, name: str) -> None:
    project.register_dataset_version(
        str(uuid4()), name, "1", f"datasets/{name}.jsonl", 10, 1, SHA, "user:o", T0
    )


def _saved_project(log: TensorantLog) -> Project:
    project = Project.create("org-a", "bot", "user:o", T0)
    log.save_all(project)
    return project


def test_peek_finds_what_load_finds_and_nothing_else(
    two_logs: tuple[TensorantLog, TensorantLog],
) -> None:
    log, _ = two_logs
    project = _saved_project(log)
    found, other_org, wrong_class, missing, malformed = log.peek(
        (Project, str(project.id), "org-a"),
        (Project, str(project.id), "org-b"),
        (Connection, str(project.id), "org-a"),
        (Project, str(uuid4()), "org-a"),
        (Project, "not-a-uuid", "org-a"),
    )
    assert isinstance(found, Project) and found.name == "bot"
    assert found.version == log.project("org-a", str(project.id)).version
    assert (other_org, wrong_class, missing, malformed) == (None, None, None, None)


def test_a_kept_aggregate_is_read_again_when_another_process_changed_it(
    two_logs: tuple[TensorantLog, TensorantLog],
) -> None:
    api, worker = two_logs
    project = _saved_project(api)
    (first,) = api.peek((Project, str(project.id), "org-a"))
    (again,) = api.peek((Project, str(project.id), "org-a"))
    assert again is first  # the same version: kept, not read and decoded again
    changed = worker.project("org-a", str(project.id))
    _register(changed, "chats")
    worker.save_all(changed)
    (now,) = api.peek((Project, str(project.id), "org-a"))
    assert now is not first
    assert [d["name"] for d in now.datasets.values()] == ["chats"]
    assert not first.datasets  # what a caller held is never changed under it


def test_a_draft_sees_a_dataset_registered_by_another_process(
    two_logs: tuple[TensorantLog, TensorantLog],
) -> None:
    """The check a draft makes through `peek` (the dataset is in the project) follows every
    write made elsewhere."""
    api, worker = two_logs
    project = _saved_project(api)
    (before,) = api.peek((Project, str(project.id), "org-a"))
    assert isinstance(before, Project) and not before.datasets
    for name in ("a", "b", "c"):
        p = worker.project("org-a", str(project.id))
        _register(p, name)
        worker.save_all(p)
        (seen,) = api.peek((Project, str(project.id), "org-a"))
        assert isinstance(seen, Project)
        assert name in {d["name"] for d in seen.datasets.values()}
        assert seen.version == p.version


@pytest.mark.parametrize("db", ["file", "memory"])
def test_a_version_read_sees_each_commit_at_once_on_a_file_or_in_memory(
    db: str, tmp_path: Any
) -> None:
    """SQLite versions are read on a plain connection of the file (kept open), or through the
    library's pool for an in-memory database, which is one per connection."""
    name = str(tmp_path / "events.db") if db == "file" else "file:versions?mode=memory&cache=shared"
    env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": name}
    log = TensorantLog(env, reads=log_reads)
    try:
        project = _saved_project(log)
        other = _saved_project(log)
        assert log.versions([uuid4()]) == {}  # one unknown id: nothing, not a None version
        seen = []
        for n in range(3):
            _register(project, f"d{n}")
            log.save_all(project)
            seen.append(log.versions([project.id]))
        assert seen == [{project.id: 2}, {project.id: 3}, {project.id: 4}]
        assert log.versions([project.id, other.id, uuid4()]) == {project.id: 4, other.id: 1}
    finally:
        log.close()
