"""R6 trainer log lines outside the event store: bounded per run, paged; SQLite and PostgreSQL."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.sql import SQL, Identifier

from adapters.logstore import LogStore, open_log_store
from application.ports import NewerReport
from tests.conftest import POSTGRES_URL, require_service

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
MakeStore = Callable[..., LogStore]


def lines(n: int, start: int = 0) -> list[tuple[datetime, str]]:
    return [(T0 + timedelta(seconds=start + i), f"step {start + i}") for i in range(n)]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[MakeStore]:
    opened: list[LogStore] = []
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'logs.db'}"
        schema = None
    else:
        require_service("PostgreSQL", "127.0.0.1", 5432)
        schema = f"tlog_{uuid.uuid4().hex[:12]}"
        url = f"{POSTGRES_URL}?schema={schema}"

    def make(max_lines: int = 10) -> LogStore:
        store = open_log_store(url, max_lines=max_lines)
        opened.append(store)
        return store

    yield make
    for store in opened:
        store.close()
    if schema:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(schema)))


def test_lines_are_numbered_in_order_and_paged(open_store: MakeStore) -> None:
    store: LogStore = open_store()
    assert store.last_seq("r1") == 0
    assert store.append("r1", lines(3)) == 3
    assert store.append("r1", lines(2, start=3)) == 5
    assert store.append("r1", []) == 5
    page, next_after = store.read("r1", after=0, limit=2)
    assert [(line["seq"], line["text"]) for line in page] == [(1, "step 0"), (2, "step 1")]
    assert next_after == 2
    page, next_after = store.read("r1", after=next_after, limit=10)
    assert [line["seq"] for line in page] == [3, 4, 5]
    assert page[0]["time"] == T0 + timedelta(seconds=2)
    assert page[0]["time"].tzinfo is not None
    assert store.read("r1", after=next_after, limit=10) == ([], 5)
    assert store.last_seq("r1") == 5


def test_each_run_keeps_only_its_newest_lines(open_store: MakeStore) -> None:
    store: LogStore = open_store(max_lines=10)
    store.append("r1", lines(7))
    assert store.append("r1", lines(18, start=7)) == 25
    store.append("r2", lines(4))
    page, next_after = store.read("r1", after=0, limit=100)
    assert [line["seq"] for line in page] == list(range(16, 26))  # the newest 10
    assert next_after == 25
    assert [line["seq"] for line in store.read("r2", after=0, limit=100)[0]] == [1, 2, 3, 4]


def test_times_are_stored_as_utc(open_store: MakeStore) -> None:
    store: LogStore = open_store()
    cest = timezone(timedelta(hours=2))
    store.append("r1", [(datetime(2026, 6, 1, 12, 0, tzinfo=cest), "hello")])
    (line,), _ = store.read("r1")
    assert line["time"] == datetime(2026, 6, 1, 10, 0, tzinfo=UTC)
    assert line["time"].utcoffset() == timedelta(0)


def test_concurrent_appends_from_two_stores_never_share_a_sequence_number(
    open_store: MakeStore,
) -> None:
    stores: list[LogStore] = [open_store(max_lines=1000), open_store(max_lines=1000)]

    def writer(store: LogStore) -> None:
        for i in range(20):
            store.append("r1", lines(3, start=i * 3))

    threads = [threading.Thread(target=writer, args=(st,)) for st in stores for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    page, last = stores[0].read("r1", after=0, limit=1000)
    assert [line["seq"] for line in page] == list(range(1, 241))
    assert last == stores[1].last_seq("r1") == 240


def test_a_repeated_batch_is_stored_once_and_answers_the_same(open_store: MakeStore) -> None:
    store: LogStore = open_store(max_lines=10)
    assert store.append("r1", lines(3), batch="b1") == 3
    assert store.append("r1", lines(2, start=3), batch="b2") == 5
    assert store.append("r1", lines(3), batch="b1") == 3  # the retry of b1: nothing stored
    assert store.append("r2", lines(1), batch="b1") == 1  # batch ids are per run
    assert store.append("r1", lines(1, start=5)) == 6  # no batch id: always stored
    page, _ = store.read("r1", after=0, limit=100)
    assert [line["text"] for line in page] == [f"step {i}" for i in range(6)]


def test_concurrent_copies_of_a_batch_store_it_once(open_store: MakeStore) -> None:
    stores: list[LogStore] = [open_store(max_lines=1000), open_store(max_lines=1000)]
    answers: list[int] = []
    go = threading.Barrier(4)

    def send(store: LogStore) -> None:
        go.wait(10)
        for i in range(10):
            answers.append(store.append("r1", lines(2, start=i * 2), batch=f"b{i}"))

    threads = [threading.Thread(target=send, args=(st,)) for st in stores for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    page, last = stores[0].read("r1", after=0, limit=1000)
    assert last == 20 and len(page) == 20
    assert sorted(line["text"] for line in page) == sorted(f"step {i}" for i in range(20))
    assert len(answers) == 40 and set(answers) <= set(range(2, 21, 2))


def test_a_batch_record_goes_with_its_pruned_lines(open_store: MakeStore) -> None:
    store: LogStore = open_store(max_lines=4)
    store.append("r1", lines(2), batch="old")
    store.append("r1", lines(4, start=2), batch="new")  # prunes seq 1..2, hence "old"
    assert store.append("r1", lines(2), batch="new") == 6
    assert store.append("r1", lines(2), batch="old") == 8  # forgotten: stored again


def test_an_unknown_url_is_refused() -> None:
    with pytest.raises(ValueError, match="unsupported log store URL"):
        open_log_store("mysql://x")


def test_reports_are_claimed_once_across_channels_and_threads(open_store: MakeStore) -> None:
    """A `(boot, seq)` is stored once whichever channel (and thread) brings it first;
    plain lines are always stored; state documents round-trip."""
    store = open_store(max_lines=1000)
    keyed = [("boot1", i, T0 + timedelta(seconds=i), f"line {i}") for i in range(1, 41)]
    stored: list[int] = []

    def deliver(via: str, order: list[tuple[str | None, int | None, datetime, str]]) -> None:
        for i in range(0, len(order), 7):
            stored.append(store.append_reports("r1", order[i : i + 7], via))

    threads = [
        threading.Thread(target=deliver, args=(via, keyed))
        for via in ("callback", "mailbox", "pod_logs")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(stored) == 40
    texts = [x["text"] for x in store.read("r1", 0, 1000)[0]]
    assert sorted(texts) == sorted(f"line {i}" for i in range(1, 41))
    assert store.append_reports("r1", [(None, None, T0, "plain"), *keyed[:3]], "pod_logs") == 1
    assert store.claim("r1", "boot1", 99, "mailbox") is True
    assert store.claim("r1", "boot1", 99, "callback") is False
    assert store.claim("r2", "boot1", 99, "callback") is True
    assert store.claim("r1", "boot2", 7, "mailbox") is True
    # what a mailbox drain asks before it fetches a chunk: this boot's claims, this run's
    assert store.claimed_seqs("r1", "boot1") == {*range(1, 41), 99}
    assert store.claimed_seqs("r1", "boot2") == {7}
    assert store.claimed_seqs("r2", "boot1") == {99}
    assert store.get_state("r1", "progress") is None
    store.put_state("r1", "progress", {"step": 3, "via": "mailbox"})
    store.put_state("r1", "progress", {"step": 4, "via": "pod_logs"})
    assert store.get_state("r1", "progress") == {"step": 4, "via": "pod_logs"}


def test_a_fresh_claim_changes_its_state_documents_in_the_same_transaction(
    open_store: MakeStore,
) -> None:
    """One commit per report: the claim, the progress (a function of the current one) and
    when it was seen; a repeated claim changes nothing."""
    store = open_store()
    store.put_state("r1", "progress", {"step": 5})

    def newer(step: int) -> Callable[[dict[str, Any] | None], dict[str, Any] | None]:
        def change(last: dict[str, Any] | None) -> dict[str, Any] | None:
            return {"step": step} if last is None or last["step"] < step else None

        return change

    seen = {"at": "2026-01-05T09:00:00Z", "via": "mailbox"}
    assert store.claim("r1", "b", 1, "mailbox", {"progress": newer(7), "seen": seen}) is True
    assert store.get_state("r1", "progress") == {"step": 7}
    assert store.get_state("r1", "seen") == seen
    later = {"at": "2026-01-05T09:01:00Z", "via": "callback"}
    assert store.claim("r1", "b", 1, "callback", {"progress": newer(9), "seen": later}) is False
    assert store.get_state("r1", "progress") == {"step": 7}  # the repeat changed nothing
    assert store.get_state("r1", "seen") == seen
    assert store.claim("r1", "b", 2, "callback", {"progress": newer(6), "seen": later}) is True
    assert store.get_state("r1", "progress") == {"step": 7}  # None kept the newer one
    assert store.get_state("r1", "seen") == later

    def broken(_last: dict[str, Any] | None) -> dict[str, Any] | None:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        store.claim("r1", "b", 3, "callback", {"seen": seen, "progress": broken})
    assert store.claim("r1", "b", 3, "callback") is True  # the failed claim was rolled back
    assert store.get_state("r1", "seen") == later


# (stored progress, arriving progress): NewerReport's rule in Python decides what is kept
NEWER_CASES = [
    (None, {"boot": "b", "seq": 1, "time": "2026-01-05T09:00:00.000Z"}),
    ({"boot": "b", "seq": 4, "time": "T9"}, {"boot": "b", "seq": 5, "time": "T1"}),  # seq wins
    ({"boot": "b", "seq": 5, "time": "T1"}, {"boot": "b", "seq": 5, "time": "T9"}),  # a copy
    ({"boot": "b", "seq": 9, "time": "T1"}, {"boot": "b", "seq": 10, "time": "T0"}),  # 9 < 10
    ({"boot": "a", "seq": 9, "time": "T2"}, {"boot": "b", "seq": 1, "time": "T1"}),  # older boot
    ({"boot": "a", "seq": 9, "time": "T2"}, {"boot": "b", "seq": 1, "time": "T2"}),  # same time
    ({"boot": "a", "seq": 9, "time": "T2"}, {"boot": "b", "seq": 1, "time": "T3"}),
    # by code point, as Python compares str: "Z" < "a" (a collation might say otherwise)
    ({"boot": "a", "seq": 1, "time": "2026a"}, {"boot": "b", "seq": 1, "time": "2026Z"}),
    ({"boot": "a", "seq": 1, "time": "2026Z"}, {"boot": "b", "seq": 1, "time": "2026a"}),
    ({"step": 3}, {"boot": "b", "seq": 1, "time": ""}),  # a stored body without a key
]


@pytest.mark.parametrize(("stored", "arriving"), NEWER_CASES)
def test_a_newer_report_rule_is_applied_by_the_store_as_in_python(
    open_store: MakeStore, stored: dict[str, Any] | None, arriving: dict[str, Any]
) -> None:
    """PostgreSQL applies `NewerReport` in the claim's one statement; what it keeps
    is what the rule keeps in Python (SQLite and the memory store call the rule)."""
    store = open_store()
    if stored is not None:
        store.put_state("r1", "progress", stored)
    body = {**arriving, "step": 1, "via": "callback"}
    rule = NewerReport(body)
    expected = rule(stored)
    seen = {"at": "2026-01-05T09:00:00Z", "via": "callback"}
    assert store.claim(
        "r1", body["boot"], body["seq"] + 100, "callback", {"progress": rule, "seen": seen}
    )
    assert store.get_state("r1", "progress") == (expected if expected is not None else stored)
    assert store.get_state("r1", "seen") == seen
    # a repeated claim changes nothing, even with a newer body
    newest = NewerReport({**body, "seq": 10_000, "time": "U"})
    assert not store.claim("r1", body["boot"], body["seq"] + 100, "mailbox", {"progress": newest})
    assert store.get_state("r1", "progress") == (expected if expected is not None else stored)


def test_concurrent_reports_of_one_run_keep_the_newest_progress(open_store: MakeStore) -> None:
    """Reports of one boot arriving at once on two channels and threads, in any order: the
    progress shown is the highest seq's, each report claimed once."""
    store = open_store()
    claimed: list[bool] = []

    def deliver(via: str, seqs: list[int]) -> None:
        for seq in seqs:
            body = {"boot": "b", "seq": seq, "time": f"T{seq:04d}", "step": seq, "via": via}
            claimed.append(store.claim("r1", "b", seq, via, {"progress": NewerReport(body)}))

    seqs = list(range(1, 61))
    threads = [
        threading.Thread(target=deliver, args=("callback", seqs)),
        threading.Thread(target=deliver, args=("mailbox", seqs[::-1])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(claimed) == 60
    progress = store.get_state("r1", "progress")
    assert progress is not None and progress["seq"] == 60


def test_commits_do_not_wait_for_the_disk(open_store: MakeStore) -> None:
    """Lines, claims and report state trade the last moments of a machine crash for no flush
    per write (adapters.logstore's docstring); run changes are events, fully durable."""
    store: Any = open_store()
    if hasattr(store, "_conn"):
        assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    else:
        with store._pool.connection() as conn:
            assert conn.execute("SHOW synchronous_commit").fetchone()[0] == "off"


def test_many_runs_states_are_read_in_one_call(open_store: MakeStore) -> None:
    """A list of runs reads its report states at once; each run gets its own state of
    the asked name, runs without one are left out, and more ids than one statement binds work."""
    store = open_store(max_lines=10)
    for i in range(450):
        store.put_state(f"r{i}", "progress", {"step": i})
    store.put_state("r1", "seen", {"at": "x"})
    ids = [f"r{i}" for i in range(500)]
    got = store.get_states(ids, "progress")
    assert got == {f"r{i}": {"step": i} for i in range(450)}
    assert store.get_states(["r1", "r2", "nope"], "seen") == {"r1": {"at": "x"}}
    assert store.get_states([], "progress") == {}


def test_states_asked_for_ahead_answer_as_get_states(open_store: MakeStore) -> None:
    store = open_store()
    store.put_state("r1", "progress", {"step": 3})
    later = store.get_states_later(["r1", "r2"], "progress")
    store.put_state("r2", "progress", {"step": 1})  # outside a pinned connection: read at once
    assert later() == {"r1": {"step": 3}}
    assert store.get_states_later([], "progress")() == {}


@pytest.mark.postgres
def test_on_a_pinned_connection_held_back_states_travel_with_the_next_read(
    tmp_path: Path,
) -> None:
    """The trainer reports and the views on one PostgreSQL database share a request's pinned
    connection (`one_connection`): the states asked for ahead come back with the view read."""
    from projections.store.pg import pinned_to
    from projections.store.postgres import PostgresViewStore

    require_service("PostgreSQL", "127.0.0.1", 5432)
    schema = f"tlog_{uuid.uuid4().hex[:12]}"
    store = open_log_store(f"{POSTGRES_URL}?schema={schema}")
    views = PostgresViewStore(POSTGRES_URL, schema=schema, max_size=2)
    try:
        store.put_state("r1", "progress", {"step": 3})
        store.put_state("r%s'1", "progress", {"step": 4})  # quoted into the statement
        store.put_state('r{1,"}', "progress", {"step": 5})  # and into an array literal
        with views.batch("runs") as b:
            b.put("o1", "run:r1", {"id": "r1"})
        with views.one_connection():
            pinned = pinned_to(views.pool)
            assert pinned is not None
            later = store.get_states_later(["r1", "r%s'1", "r2", 'r{1,"}'], "progress")
            assert pinned.waiting  # held back, not sent
            assert views.get("runs", "o1", "run:r1") == {"id": "r1"}
            pinned.conn.close()  # nothing more can be sent: the states came with that read
            assert later() == {"r1": {"step": 3}, "r%s'1": {"step": 4}, 'r{1,"}': {"step": 5}}
    finally:
        store.close()
        views.close()
        with psycopg.connect(POSTGRES_URL, autocommit=True) as conn:
            conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(schema)))


def test_a_state_holds_what_json_can_say_of_any_body(open_store: MakeStore) -> None:
    """State documents are written by orjson, or by the stdlib for what orjson refuses: a
    number beyond 64 bits is kept exactly, and a float that is not a number reads back null
    (the stdlib would write `NaN`, which is not JSON)."""
    store = open_store()
    body = {"seq": 2**70, "loss": float("nan"), "lr": 2e-05, "text": "é\u2028\U0001f600"}
    store.put_state("r1", "progress", {**body, "rates": [float("-inf"), 1.0]})
    assert store.get_state("r1", "progress") == {**body, "loss": None, "rates": [None, 1.0]}
    store.put_state("r1", "seen", {"loss": float("nan"), "at": "t"})
    assert store.get_state("r1", "seen") == {"loss": None, "at": "t"}
    assert store.claim("r1", "b", 1, "callback", {"progress": NewerReport(_report(1, nan=True))})
    shown = store.get_state("r1", "progress")
    assert shown is not None and shown["seq"] == 1 and shown["loss"] is None


def _report(seq: int, *, nan: bool = False) -> dict[str, Any]:
    return {"boot": "b", "seq": seq, "time": "T", "loss": float("nan") if nan else 1.5}


def test_metric_points_are_kept_once_per_report_and_paged(open_store: MakeStore) -> None:
    """R17: each progress report's measures, once per `(boot, seq)` whichever channel brings
    it, paged by a cursor that only moves forward; each run its own series."""
    store: LogStore = open_store()
    for seq, loss in ((2, 3.0), (3, 2.5), (4, 2.0)):
        assert store.add_metric("r1", "b1", seq, {"step": seq - 1, "loss": loss}) is True
    assert store.add_metric("r1", "b1", 3, {"step": 2, "loss": 99.0}) is False  # a copy
    assert store.add_metric("r2", "b1", 3, {"step": 2, "loss": 7.0}) is True
    page, next_after = store.read_metrics("r1", after=0, limit=2)
    assert [(p["step"], p["loss"]) for p in page] == [(1, 3.0), (2, 2.5)]
    page, last = store.read_metrics("r1", after=next_after, limit=10)
    assert [(p["step"], p["loss"]) for p in page] == [(3, 2.0)]
    assert last > next_after
    assert store.read_metrics("r1", after=last) == ([], last)
    assert [p["loss"] for p in store.read_metrics("r2")[0]] == [7.0]


def test_many_runs_lines_and_cursors_are_written_in_one_call(open_store: MakeStore) -> None:
    """R6 at scale: the Pod-log followers' batch. Each `(boot, seq)` is claimed once (across
    channels and within the batch), plain lines always stored, each run numbered on from its
    last line and pruned to its bound; the cursors are put, and "seen" only for a run whose
    batch held a fresh trainer line."""
    store = open_store(max_lines=4)
    store.append_reports("a", [("b1", 1, T0, "a1")], "callback")
    stored = store.append_many(
        {
            "a": [("b1", 1, T0, "a1"), ("b1", 2, T0, "a2"), (None, None, T0, "plain")],
            "b": [("b1", 1, T0, "b1"), ("b1", 1, T0, "b1 again")],
            "c": [("b1", 7, T0, "c7")],
        },
        "pod_logs",
        {"a": {"cursor": {"id": "a/3"}}, "c": {"cursor": {"id": "c/1"}}},
        ("seen", {"via": "pod_logs"}),
    )
    assert stored == {"a": 2, "b": 1, "c": 1}
    assert [x["text"] for x in store.read("a")[0]] == ["a1", "a2", "plain"]
    assert [x["seq"] for x in store.read("a")[0]] == [1, 2, 3]
    assert [x["text"] for x in store.read("b")[0]] == ["b1"]
    assert store.get_state("a", "cursor") == {"id": "a/3"}
    assert store.get_state("b", "cursor") is None
    assert store.get_states(["a", "b", "c"], "seen") == {
        "a": {"via": "pod_logs"},
        "b": {"via": "pod_logs"},
        "c": {"via": "pod_logs"},
    }
    again = store.append_many({"c": [("b1", 7, T0, "c7"), (None, None, T0, "p")]}, "x", {}, None)
    assert again == {"c": 1}
    store.append_many({"a": [(None, None, T0, f"more {i}") for i in range(3)]}, "x", {}, None)
    assert [x["seq"] for x in store.read("a")[0]] == [3, 4, 5, 6]  # the newest 4 kept
