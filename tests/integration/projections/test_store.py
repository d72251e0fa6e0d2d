"""The view store contract, the same on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any
from urllib.parse import quote
from uuid import UUID

import psycopg
import pytest

from projections.store.base import DocText, Follow, ViewBusyError
from projections.store.pg import pinned_to
from projections.store.postgres import PostgresViewStore
from tests.integration.projections.conftest import World


def test_a_batch_commits_docs_and_position_together(world: World) -> None:
    store = world.store
    with store.batch("v") as b:
        assert b.position == 0
        b.put("o1", "a", {"n": 1})
        b.put("o1", "b", {"n": 2})
        b.set_position(7)

    assert store.position("v") == 7
    assert store.get("v", "o1", "a") == {"n": 1}
    assert store.get("v", "o2", "a") is None
    assert store.get("other", "o1", "a") is None


def test_nothing_is_written_when_the_batch_raises(world: World) -> None:
    store = world.store
    with store.batch("v") as b:
        b.put("o1", "a", {"n": 1})
        b.set_position(1)

    def fail_mid_batch() -> None:
        with store.batch("v") as b:
            b.put("o1", "a", {"n": 99})
            b.put("o1", "z", {"n": 3})
            b.delete("o1", "a")
            b.set_position(5)
            raise RuntimeError

    with pytest.raises(RuntimeError):
        fail_mid_batch()

    assert store.position("v") == 1
    assert store.list("v", "o1") == [("a", {"n": 1})]


def test_a_batch_sees_its_own_uncommitted_writes(world: World) -> None:
    store = world.store
    with store.batch("v") as b:
        b.put("o1", "k1", {"n": 1})
        b.put("o1", "k2", {"n": 2})
        b.set_position(1)
    with store.batch("v") as b:
        b.put("o1", "k3", {"n": 3})
        b.delete("o1", "k1")
        doc = b.get("o1", "k2")
        assert doc == {"n": 2}
        doc["n"] = 20
        b.put("o1", "k2", doc)
        assert b.get("o1", "k1") is None
        assert b.list("o1") == [("k2", {"n": 20}), ("k3", {"n": 3})]
        assert b.list("o1", "k3") == [("k3", {"n": 3})]
        assert store.list("v", "o1") == [("k1", {"n": 1}), ("k2", {"n": 2})]  # not yet
    assert store.list("v", "o1") == [("k2", {"n": 20}), ("k3", {"n": 3})]


def test_get_many_gives_the_existing_documents_of_the_keys_by_key(world: World) -> None:
    with world.store.batch("v") as b:
        b.put("o1", "compute", {"n": 1})
        b.put("o1", "storage", {"n": 2, "at": "é"})
        b.put("o2", "gone", {"n": 3})
    found = world.store.get_many("v", "o1", ["storage", "compute", "gone"])
    assert found == {"compute": {"n": 1}, "storage": {"n": 2, "at": "é"}}
    assert world.store.get_many("v", "o1", []) == {}
    assert world.store.get_many("other", "o1", ["compute"]) == {}


def test_get_followed_gives_a_document_and_the_one_it_names(world: World) -> None:
    follow = Follow("roster", org_field="org", key_field="user", key_prefix="member:")
    with world.store.batch("index") as b:
        b.put("_", "h1", {"org": "o1", "user": "u1"})
        b.put("_", "h2", {"org": "o1", "user": "u2"})  # no roster document
        b.put("_", "h3", {"org": "o1"})  # names nothing
    with world.store.batch("roster") as b:
        b.put("o1", "member:u1", {"role": "owner"})
        b.put("o2", "member:u2", {"role": "viewer"})  # another organization's
    store = world.store
    assert store.get_followed("index", "_", "h1", follow) == (
        {"org": "o1", "user": "u1"},
        {"role": "owner"},
    )
    assert store.get_followed("index", "_", "h2", follow) == ({"org": "o1", "user": "u2"}, None)
    assert store.get_followed("index", "_", "h3", follow) == ({"org": "o1"}, None)
    assert store.get_followed("index", "_", "nope", follow) == (None, None)
    assert store.get_followed("index", "o1", "h1", follow) == (None, None)


def _index_and_roster(world: World) -> Follow:
    follow = Follow("roster", org_field="org", key_field="user", key_prefix="member:")
    with world.store.batch("index") as b:
        b.put("_", "h1", {"org": "o1", "user": "u1"})
        b.put("_", "h2", {"org": "o1", "user": "u2"})
    with world.store.batch("roster") as b:
        b.put("o1", "member:u1", {"role": "owner"})
    return follow


def test_a_read_held_back_in_one_connection_is_answered_with_the_next_read(world: World) -> None:
    follow = _index_and_roster(world)
    store = world.store
    with store.one_connection():
        first = store.get_followed_later("index", "_", "h1", follow)
        missing = store.get_followed_later("index", "_", "nope", follow)
        assert store.get_many("roster", "o1", ["member:u1"]) == {"member:u1": {"role": "owner"}}
        assert first() == ({"org": "o1", "user": "u1"}, {"role": "owner"})
        assert missing() == (None, None)
        alone = store.get_followed_later("index", "_", "h2", follow)  # no read after it
        assert alone() == ({"org": "o1", "user": "u2"}, None)
        assert [(k, json.loads(t)) for k, t in store.list_text("roster", "o1")] == [
            ("member:u1", {"role": "owner"})
        ]
    assert store.get_followed_later("index", "_", "h1", follow)()[1] == {"role": "owner"}


def test_lists_and_key_sets_held_back_answer_as_list_and_get_many(world: World) -> None:
    _index_and_roster(world)
    store = world.store
    with store.one_connection():
        listed = store.list_later("index", "_")
        many = store.get_many_later("roster", "o1", ["member:u1", "member:nobody"])
        doc = store.get_later("roster", "o1", "member:u1")
        assert store.get("index", "_", "h2") == {"org": "o1", "user": "u2"}
        assert listed() == store.list("index", "_")
        assert [k for k, _ in listed()] == ["h1", "h2"]
        assert many() == {"member:u1": {"role": "owner"}}
        assert doc() == {"role": "owner"}
        assert store.get_later("roster", "o1", "member:nobody")() is None


@pytest.mark.postgres
@pytest.mark.parametrize("world", ["postgres"], indirect=True)
def test_on_postgresql_the_held_back_read_travels_in_the_next_reads_round_trip(
    world: World,
) -> None:
    store = world.store
    assert isinstance(store, PostgresViewStore)
    follow = _index_and_roster(world)
    with store.one_connection():
        pinned = pinned_to(store.pool)
        assert pinned is not None
        answer = store.get_followed_later("index", "_", "h1", follow)
        assert store.get("roster", "o1", "member:u1") == {"role": "owner"}
        pinned.conn.close()  # nothing more can be sent: the answer came with that read
        assert answer() == ({"org": "o1", "user": "u1"}, {"role": "owner"})
    with store.one_connection():
        pinned = pinned_to(store.pool)
        assert pinned is not None
        answer = store.get_followed_later("index", "_", "h1", follow)
        with pytest.raises(psycopg.errors.DivisionByZero):
            pinned.conn.execute("SELECT 1 / 0")  # the next query fails: its text held both
        assert answer() == ({"org": "o1", "user": "u1"}, {"role": "owner"})  # sent alone


@pytest.mark.postgres
@pytest.mark.parametrize("world", ["postgres"], indirect=True)
def test_on_postgresql_held_back_reads_run_as_statements_prepared_once_per_connection(
    world: World,
) -> None:
    """A multi-statement text is parsed and planned on every request unless its
    statements are prepared; they are, once per connection, and sent as EXECUTE. A session
    that lost them (DEALLOCATE ALL) prepares them again; the answers never change."""
    store = world.store
    assert isinstance(store, PostgresViewStore)
    follow = _index_and_roster(world)

    def prepared(conn: Any) -> set[str]:
        rows = conn.execute("SELECT statement FROM pg_prepared_statements").fetchall()
        return {r[0] for r in rows if "PREPARE tensorant_" in r[0]}

    with store.one_connection():
        pinned = pinned_to(store.pool)
        assert pinned is not None
        for round_ in range(3):
            answer = store.get_followed_later("index", "_", "h1", follow)
            many = store.get_many_later("roster", "o1", ["member:u1", "member:nobody"])
            assert store.get("roster", "o1", "member:u1") == {"role": "owner"}
            assert answer() == ({"org": "o1", "user": "u1"}, {"role": "owner"})
            assert many() == {"member:u1": {"role": "owner"}}
            # the two held back and the read that carried them
            assert len(prepared(pinned.conn)) == 3
            if round_ == 1:
                pinned.conn.execute("DEALLOCATE ALL")


def test_list_text_where_gives_the_documents_whose_string_at_a_path_is_one_of_the_values(
    world: World,
) -> None:
    docs: dict[str, dict[str, Any]] = {
        "run:a": {"c": {"s": "running"}},
        "run:b": {"c": {"s": "none"}},
        "run:c": {"c": {"s": "stopped"}, "n": "é"},
        "run:d": {"c": {"s": None}},
        "run:e": {"c": {}},
        "run:f": {"c": {"s": 1}},
        "run:g": {"c": "running"},
        "rum:h": {"c": {"s": "running"}},
    }
    with world.store.batch("v") as b:
        for key, doc in docs.items():
            b.put("o1", key, doc)
        b.put("o2", "run:x", {"c": {"s": "running"}})
    store = world.store
    found = store.list_text_where("v", "o1", "run:", ["c", "s"], ["stopped", "running", "1"])
    assert [(k, json.loads(t)) for k, t in found] == [(k, docs[k]) for k in ("run:a", "run:c")]
    assert store.list_text_where("v", "o1", "run:", ["c", "s"], []) == []
    everywhere = store.list_text_where("v", "o1", "", ["c", "s"], ["running"])
    assert [k for k, _ in everywhere] == ["rum:h", "run:a"]
    texts = dict(store.list_text("v", "o1", "run:"))
    assert all(texts[k] == t for k, t in found)  # the very texts list_text gives


def test_list_filters_by_prefix_orders_by_code_point_and_paginates(world: World) -> None:
    keys = ["run/b", "run/a", "run/B", "run/é", "run0", "ru", "stor/a", "run/a/1"]
    with world.store.batch("v") as b:
        for key in keys:
            b.put("o1", key, {"k": key})
        b.put("o2", "run/x", {"k": "other org"})

    listed = [k for k, _ in world.store.list("v", "o1", prefix="run/")]
    assert listed == ["run/B", "run/a", "run/a/1", "run/b", "run/é"]
    page = world.store.list("v", "o1", prefix="run/", after="run/a", limit=2)
    assert [k for k, _ in page] == ["run/a/1", "run/b"]
    assert [k for k, _ in world.store.list("v", "o1")] == sorted(keys)


def test_list_json_gives_the_listed_documents_as_json_texts(world: World) -> None:
    keys = ["bill:b", "bill:a", "bill:é", "bill", "bilm:a", "run:x"]
    with world.store.batch("v") as b:
        for i, key in enumerate(keys):
            b.put("o1", key, {"k": key, "amount": "1.70", "n": i, "nested": {"x": [1, None]}})
        b.put("o2", "bill:z", {"k": "other org"})

    texts = world.store.list_json("v", "o1", "bill:")
    assert [json.loads(t) for t in texts] == [d for _, d in world.store.list("v", "o1", "bill:")]
    assert [json.loads(t)["k"] for t in texts] == ["bill:a", "bill:b", "bill:é"]
    assert all("\n" not in t for t in texts)  # one line each: newline-delimited JSON


def test_list_json_lines_is_list_json_as_newline_delimited_utf8(world: World) -> None:
    assert world.store.list_json_lines("v", "o1", "bill:") == b""
    keys = ["bill:b", "bill:a", "bill:é", "bill", "bilm:a", "run:x"]
    with world.store.batch("v") as b:
        for i, key in enumerate(keys):
            b.put("o1", key, {"k": key, "amount": "1.70", "n": i, "nested": {"x": [1, None]}})
        b.put("o2", "bill:z", {"k": "other org"})

    lines = world.store.list_json_lines("v", "o1", "bill:")
    assert lines == "\n".join(world.store.list_json("v", "o1", "bill:")).encode()
    assert [json.loads(line)["k"] for line in lines.split(b"\n")] == ["bill:a", "bill:b", "bill:é"]


def test_docs_keep_decimal_datetime_and_uuid_as_text(world: World) -> None:
    when = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
    uid = UUID(int=5)
    with world.store.batch("v") as b:
        b.put("o1", "m", {"cost": Decimal("0.10"), "at": when, "id": uid, "nested": [{"x": 1}]})

    assert world.store.get("v", "o1", "m") == {
        "cost": "0.10",
        "at": "2025-01-02T03:04:05Z",
        "id": "00000000-0000-0000-0000-000000000005",
        "nested": [{"x": 1}],
    }


def test_digest_depends_on_content_not_on_write_order_or_view_name(world: World) -> None:
    store = world.store
    with store.batch("one") as b:
        b.put("o1", "a", {"x": 1, "y": 2})
        b.put("o2", "b", {"z": [1, 2]})
    with store.batch("two") as b:
        b.put("o2", "b", {"z": [1, 2]})
        b.put("o1", "a", {"y": 2, "x": 1})
    assert store.digest("one") == store.digest("two")
    assert store.list_all("one") == [("o1", "a", {"x": 1, "y": 2}), ("o2", "b", {"z": [1, 2]})]

    with store.batch("two") as b:
        b.put("o1", "a", {"x": 1, "y": 3})
    assert store.digest("one") != store.digest("two")


def test_reset_deletes_one_views_docs_and_position(world: World) -> None:
    store = world.store
    for view in ("v", "w"):
        with store.batch(view) as b:
            b.put("o1", "a", {})
            b.set_position(3)
    store.reset("v")

    assert (store.position("v"), store.list_all("v")) == (0, [])
    assert (store.position("w"), len(store.list_all("w"))) == (3, 1)


def test_a_second_writer_on_the_same_view_fails_fast_when_asked_not_to_wait(world: World) -> None:
    other = world.new_store()
    with world.store.batch("v") as b:
        b.set_position(1)
        with pytest.raises(ViewBusyError):
            other.batch("v", wait=False)
    with other.batch("v", wait=False) as b2:
        assert b2.position == 1


def test_the_position_never_goes_back(world: World) -> None:
    with world.store.batch("v") as b:
        b.set_position(4)
        with pytest.raises(ValueError, match="cannot go back"):
            b.set_position(3)


def test_a_listing_read_again_shows_every_change_another_writer_made(world: World) -> None:
    """Both stores keep a listing's texts between reads (PostgreSQL: with the view's token);
    whatever another store instance (another process) changes shows on the next read."""
    reader, writer = world.store, world.new_store()

    def listed(org: str = "o") -> list[tuple[str, Any]]:
        return [(k, json.loads(t)) for k, t in reader.list_text("v", org, "run:")]

    def where(state: str) -> list[str]:
        return [k for k, _ in reader.list_text_where("v", "o", "run:", ["state"], [state])]

    with writer.batch("v") as b:  # documents without a position (a test's or a tool's write)
        b.put("o", "run:1", {"n": 1, "state": "running"})
    assert listed() == [("run:1", {"n": 1, "state": "running"})]
    assert where("running") == ["run:1"]
    assert listed() == listed()  # read again: the same
    with writer.batch("v") as b:
        b.put("o", "run:2", {"n": 2, "state": "running"})
    assert [k for k, _ in listed()] == ["run:1", "run:2"]
    assert where("running") == ["run:1", "run:2"]
    with writer.batch("v") as b:
        b.put("p", "run:1", {"n": 9})  # another organization's: this one's list is unchanged
        b.set_position(3)
    assert [k for k, _ in listed()] == ["run:1", "run:2"] and listed("p") == [("run:1", {"n": 9})]
    with writer.batch("v") as b:  # a change at the same position (the view is tracked now)
        b.put("o", "run:2", {"n": 20, "state": "running"})
    assert listed()[1] == ("run:2", {"n": 20, "state": "running"})
    with writer.batch("v") as b:
        b.delete("o", "run:1")
        b.put("o", "run:2", {"n": 2, "state": "stopped"})
        b.set_position(4)
    assert listed() == [("run:2", {"n": 2, "state": "stopped"})]
    assert where("running") == [] and where("stopped") == ["run:2"]
    bulk = writer.replace_views(["v"])  # a rebuild
    bulk.write("v", [("o", "run:7", '{"n": 7}')])
    bulk.commit({"v": 4})  # the same position as before
    assert listed() == [("run:7", {"n": 7})]
    bulk = writer.replace_views(["v"])
    bulk.write("v", [("o", "run:8", '{"n": 8}')])
    bulk.commit({"v": 0})  # no position at all
    assert listed() == [("run:8", {"n": 8})]
    writer.reset("v")
    assert listed() == [] and listed("p") == []


@pytest.mark.postgres
@pytest.mark.parametrize("world", ["postgres", "postgres-jsonb"], indirect=True)
def test_documents_are_json_texts_unless_an_earlier_version_made_the_table(world: World) -> None:
    """`json` keeps the text written (no parse into jsonb on write, no printing it back on
    read); a table an earlier version made keeps its `jsonb` column and works as it did."""
    store = world.store
    assert isinstance(store, PostgresViewStore)
    with store.batch("v") as b:
        b.put("o", "k", {"b": 1, "a": [1.5, "x"]})
    with store.pool.connection() as conn:
        row = conn.execute(
            "SELECT data_type FROM information_schema.columns"
            " WHERE table_schema = %s AND table_name = 'view_docs' AND column_name = 'doc'",
            (store.names.schema,),
        ).fetchone()
    jsonb = world.kind == "postgres-jsonb"
    assert row == (("jsonb",) if jsonb else ("json",))
    # json: the text as written (as SQLite keeps it); jsonb: as PostgreSQL prints it back
    written = '{"a": [1.5, "x"], "b": 1}' if jsonb else '{"b":1,"a":[1.5,"x"]}'
    assert store.list_text("v", "o") == [("k", written)]
    assert store.get("v", "o", "k") == {"b": 1, "a": [1.5, "x"]}
    # A rebuild's COPY (binary rows into json, text rows into jsonb) keeps every character.
    text = '{"s":"tab\\t nl\\n back\\\\ quote\\" é 😀","n":1}'
    bulk = store.replace_views(["w"])
    bulk.write("w", [("o", "k", text)])
    bulk.commit({"w": 1})
    doc = {"s": 'tab\t nl\n back\\ quote" é 😀', "n": 1}
    assert store.get("w", "o", "k") == doc
    assert store.list_text("w", "o") == [("k", _jsonb_text(doc) if jsonb else text)]


def _jsonb_text(doc: dict[str, Any]) -> str:
    """How PostgreSQL prints a jsonb document back (keys by length, then bytes)."""
    ordered = dict(sorted(doc.items(), key=lambda kv: (len(kv[0].encode()), kv[0].encode())))
    return json.dumps(ordered, ensure_ascii=False)


@pytest.mark.postgres
def test_a_rebuild_outlasts_the_servers_idle_and_statement_timeouts(
    postgres_url: str, postgres_schema: str
) -> None:
    """A rebuild's transaction holds the views' locks while the log is read and writes each
    view in one COPY at the end: a deployment's `idle_in_transaction_session_timeout` must not
    end it meanwhile, nor its `statement_timeout` a long COPY."""
    timeouts = quote("-c idle_in_transaction_session_timeout=200 -c statement_timeout=200")
    url = f"{postgres_url}{'&' if '?' in postgres_url else '?'}options={timeouts}"
    store = PostgresViewStore(url, schema=postgres_schema, max_size=1)

    def slowly() -> Iterator[DocText]:
        yield "o", "a", '{"n":1}'
        time.sleep(0.5)  # a long COPY
        yield "o", "b", '{"n":2}'

    try:
        bulk = store.replace_views(["v"])
        time.sleep(0.5)  # fixed-sleep-ok: reading the log takes longer than the timeouts
        bulk.write("v", slowly())
        bulk.commit({"v": 3})
        assert store.list_all("v") == [("o", "a", {"n": 1}), ("o", "b", {"n": 2})]
        assert store.position("v") == 3
    finally:
        store.close()
