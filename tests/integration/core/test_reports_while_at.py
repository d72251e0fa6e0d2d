"""A trainer's report is judged on the run this process kept since its last report, unread: its
claim holds only while the log is still at that run's version (`WhileAt`). On PostgreSQL the
claim's own statement reads the version (one round trip for a report, not two); SQLite's report
store reads it in the claim's transaction from the event store's file, attached read-only. A
store that does not see the log reads it just before claiming. Either way a run another process
moved on is read again, and a run it ended voids the Pod's token with nothing of the report
recorded."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest

from adapters.event_versions import log_reads
from adapters.logstore import LogStore, PostgresLogStore, SQLiteLogStore
from application.log import TensorantLog
from application.ports import LogMoved, WhileAt
from application.run_settings import RunSettings
from application.services import Services, build_services
from application.trainer_callbacks import VIA_CALLBACK, TrainerTokenExpired
from domain.project import Project
from domain.run import TERMINAL, Run
from entrypoints.bootstrap import eventsourcing_env, open_logs
from entrypoints.settings import Settings
from tests.conftest import POSTGRES_URL
from tests.fakes import FakeCompute, FakeObjectStore, FakeVault, FixedClock
from tests.unit.application.conftest import seed_org

BOOT = "b00t0000aaaa1111"
T = "2026-12-01T10:0{}:00.000Z"
T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


@pytest.fixture
def stores(
    event_store_env: dict[str, Any], tmp_path: Path
) -> Iterator[tuple[dict[str, Any], LogStore]]:
    """An event store and the report store a deployment puts beside it (`open_logs`): a table
    in the same PostgreSQL schema, or a SQLite file of its own told where the log's file is."""
    if event_store_env["PERSISTENCE_MODULE"] == "eventsourcing.postgres":
        schema = event_store_env["POSTGRES_SCHEMA"]
        store: LogStore = PostgresLogStore(POSTGRES_URL, schema=schema, log_in_database=True)
    else:
        events = event_store_env["SQLITE_DBNAME"]
        store = SQLiteLogStore(tmp_path / "logs.db", events_path=events)
    yield event_store_env, store
    store.close()


def _never_read() -> int | None:
    raise AssertionError("the store read the version apart from its claim")


def test_a_claim_holds_only_while_the_log_is_at_the_version(
    stores: tuple[dict[str, Any], LogStore],
) -> None:
    env, store = stores
    log, other = TensorantLog(env, reads=log_reads), TensorantLog(env, reads=log_reads)
    try:
        project = _project(log)
        key = str(project.id)
        seen = {"at": "t1", "via": VIA_CALLBACK}
        assert store.claim(key, BOOT, 1, VIA_CALLBACK, {"seen": seen}, log.while_at(project))
        assert store.get_state(key, "seen") == seen
        # a repeat at the same version: not claimed again, and no LogMoved
        assert not store.claim(key, BOOT, 1, VIA_CALLBACK, {}, log.while_at(project))

        changed = _changed(other, project)
        later = {"at": "t2", "via": VIA_CALLBACK}
        table = log.while_at(project).table
        for at in (log.while_at(project), WhileAt(uuid4(), 1, lambda: None, table)):
            with pytest.raises(LogMoved):
                store.claim(key, BOOT, 2, VIA_CALLBACK, {"seen": later}, at)
        assert store.get_state(key, "seen") == seen  # nothing of it recorded
        assert store.claim(key, BOOT, 2, VIA_CALLBACK, {"seen": later})  # it was not claimed
        assert store.claim(key, BOOT, 3, VIA_CALLBACK, {}, log.while_at(changed))
    finally:
        log.close()
        other.close()


def test_the_version_is_read_in_the_claims_transaction_only_where_the_store_sees_the_log(
    stores: tuple[dict[str, Any], LogStore], tmp_path: Path
) -> None:
    env, store = stores
    log = TensorantLog(env, reads=log_reads)
    try:
        project = _project(log)
        key = str(project.id)
        table = log.while_at(project).table
        inside = WhileAt(project.id, project.version, _never_read, table)
        apart: LogStore
        if isinstance(store, PostgresLogStore):
            assert table == (env["POSTGRES_SCHEMA"], "tensorant_events")
            # a store in another database (not told the log is in its own) reads it apart
            apart = PostgresLogStore(POSTGRES_URL, schema=env["POSTGRES_SCHEMA"])
        else:
            assert table == (str(Path(env["SQLITE_DBNAME"]).resolve()), "stored_events")
            apart = SQLiteLogStore(tmp_path / "apart.db")  # not told where the log's file is
        try:
            assert store.claim(key, BOOT, 1, VIA_CALLBACK, {}, inside)
            with pytest.raises(AssertionError, match="apart from its claim"):
                apart.claim(key, BOOT, 2, VIA_CALLBACK, {}, inside)
        finally:
            apart.close()
        if isinstance(store, SQLiteLogStore):  # a log in another file than the one attached
            other = WhileAt(project.id, project.version, _never_read, ("other.db", table[1]))
            with pytest.raises(AssertionError, match="apart from its claim"):
                store.claim(key, BOOT, 3, VIA_CALLBACK, {}, other)

        reads: list[int] = []

        def latest() -> int:
            reads.append(project.version)
            return project.version

        counted = WhileAt(project.id, project.version, latest, None)
        assert store.claim(key, BOOT, 5, VIA_CALLBACK, {}, counted)
        assert reads == [project.version]  # no table to read in the statement: the log was asked
    finally:
        log.close()


@pytest.fixture
def services(stores: tuple[dict[str, Any], LogStore]) -> Iterator[Services]:
    env, store = stores
    services = build_services(
        env,
        compute=FakeCompute(),
        objects=FakeObjectStore(),
        vault=FakeVault(),
        clock=FixedClock(),
        settings=RunSettings(trainer_secret=b"k" * 32),
        reports=store,
        reads=log_reads,
    )
    yield services
    services.log.close()


def test_a_report_on_a_kept_run_another_process_ended_records_nothing(
    services: Services, event_store_env: dict[str, Any]
) -> None:
    run_id, token = _training(services)
    before = services.report_reads.shown_progress(run_id)
    assert before is not None and before["step"] == 1
    # A second report on the kept run, still current: claimed, and its progress shown.
    services.trainer.progress(run_id, token, "training", boot=BOOT, seq=2, step=2, time=T.format(2))
    shown = services.report_reads.shown_progress(run_id)
    assert shown is not None and shown["step"] == 2

    elsewhere = _elsewhere(event_store_env, run_id, "record_pod_vanished", "system")
    assert elsewhere.state in TERMINAL
    with pytest.raises(TrainerTokenExpired):
        services.trainer.progress(
            run_id, token, "training", boot=BOOT, seq=3, step=3, time=T.format(3)
        )
    with pytest.raises(TrainerTokenExpired):  # a retry of the report that started training
        services.trainer.progress(
            run_id, token, "training", boot=BOOT, seq=1, step=1, time=T.format(1)
        )
    after = services.report_reads.shown_progress(run_id)
    assert after is not None and after["step"] == 2  # nothing of the refused report
    assert services.trainer.reports.claim(run_id, BOOT, 3, VIA_CALLBACK)  # never claimed


def test_a_report_on_a_kept_run_another_process_changed_is_decided_on_the_saved_run(
    services: Services, event_store_env: dict[str, Any]
) -> None:
    run_id, token = _training(services)
    elsewhere = _elsewhere(event_store_env, run_id, "start_export", "trainer")
    assert (
        services.trainer.progress(
            run_id, token, "exporting", boot=BOOT, seq=2, step=2, time=T.format(2)
        )
        == 0
    )  # already exporting in the log: nothing to save, and no conflict
    shown = services.report_reads.shown_progress(run_id)
    assert shown is not None and (shown["step"], shown["phase"]) == (2, "exporting")
    run = services.log.load(Run, UUID(run_id))
    assert run.version == elsewhere.version


def _training(services: Services) -> tuple[str, str]:
    """A run whose Pod runs, after its first report by callback: (run id, its token)."""
    org, run_id = seed_org(services)
    services.runs.launch(org, run_id, "owner", True, "1.64")
    services.reactor.drive_run(run_id)
    token = services.trainer.token(run_id)
    services.trainer.progress(run_id, token, "training", boot=BOOT, seq=1, step=1, time=T.format(1))
    return run_id, token


def _elsewhere(env: dict[str, Any], run_id: str, command: str, actor: str) -> Run:
    """The run after another process (a log of its own) ran `command` on it."""
    other = TensorantLog({**env}, reads=log_reads)
    try:
        run = other.load(Run, UUID(run_id))
        getattr(run, command)(actor, run.modified_on)
        other.save_all(run)
    finally:
        other.close()
    return run


def _project(log: TensorantLog) -> Project:
    project = Project.create("org-a", "bot", "user:o", T0)
    log.save_all(project)
    return project


def _changed(log: TensorantLog, project: Project) -> Project:
    """The project as another process changed it."""
    changed = log.project("org-a", str(project.id))
    changed.register_dataset_version(
        str(uuid4()), "chats", "1", "datasets/chats.jsonl", 10, 1, "0" * 64, "user:o", T0
    )
    log.save_all(changed)
    return changed


def test_a_deployments_report_store_reads_its_logs_versions_in_the_claim(
    event_store_env: dict[str, Any], tmp_path: Path
) -> None:
    """`open_logs` puts the report store where it sees the deployment's log (the same
    PostgreSQL database, or the SQLite event file attached)."""
    if event_store_env["PERSISTENCE_MODULE"] == "eventsourcing.postgres":
        url = f"{POSTGRES_URL}?schema={event_store_env['POSTGRES_SCHEMA']}"
        settings = Settings(data_dir=tmp_path, database_url=url)
    else:
        settings = Settings(data_dir=tmp_path)
    log = TensorantLog({**eventsourcing_env(settings), "CREATE_TABLE": "y"}, reads=log_reads)
    store = open_logs(settings)
    try:
        project = _project(log)
        at = log.while_at(project)
        seen = WhileAt(at.aggregate_id, at.version, _never_read, at.table)
        assert store.claim(str(project.id), BOOT, 1, VIA_CALLBACK, {}, seen)
        _changed(log, project)
        with pytest.raises(LogMoved):
            store.claim(str(project.id), BOOT, 2, VIA_CALLBACK, {}, seen)
    finally:
        store.close()
        log.close()


def test_an_unreadable_attached_log_is_read_apart(tmp_path: Path) -> None:
    """SQLite attaches the log's file lazily; where it cannot read it, the claim asks the log."""
    events = tmp_path / "events.db"
    events.write_bytes(b"not a database" * 100)
    store = SQLiteLogStore(tmp_path / "logs.db", events_path=events)
    asked: list[int] = []

    def latest() -> int:
        asked.append(3)
        return 3

    at = WhileAt(uuid4(), 3, latest, (str(events.resolve()), "stored_events"))
    try:
        assert store.claim("r1", BOOT, 1, VIA_CALLBACK, {"seen": {"at": "t"}}, at)
        assert asked == [3] and store.get_state("r1", "seen") == {"at": "t"}
        with pytest.raises(LogMoved):
            store.claim(
                "r1", BOOT, 2, VIA_CALLBACK, {}, WhileAt(at.aggregate_id, 2, latest, at.table)
            )
    finally:
        store.close()
