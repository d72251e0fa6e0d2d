"""View store helpers and the SQLite store, without any server."""

from __future__ import annotations

import threading
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from uuid import UUID

import pytest

from projections.store.base import canonical, dumps, prefix_upper_bound
from projections.store.sqlite import SQLiteViewStore
from projections.store.urls import open_view_store, parse_postgres_url


def test_json_encoding_turns_decimal_datetime_and_uuid_into_text() -> None:
    east = timezone(timedelta(hours=2))
    doc = {
        "price": Decimal("1.2300"),
        "at": datetime(2025, 5, 1, 12, 0, tzinfo=east),
        "day": date(2025, 5, 1),
        "id": UUID(int=1),
        "tags": {"b", "a"},
    }
    assert dumps(doc) == (
        '{"price":"1.2300","at":"2025-05-01T10:00:00Z","day":"2025-05-01",'
        '"id":"00000000-0000-0000-0000-000000000001","tags":["a","b"]}'
    )
    assert canonical({"b": 1, "a": 2}) == canonical({"a": 2, "b": 1}) == '{"a":2,"b":1}'


def test_json_encoding_refuses_objects_it_does_not_know() -> None:
    with pytest.raises(TypeError, match="object is not JSON serialisable"):
        dumps({"x": object()})


def test_prefix_upper_bound_is_the_next_string_after_every_key_with_the_prefix() -> None:
    assert prefix_upper_bound("run/") == "run0"
    assert prefix_upper_bound("") is None
    assert prefix_upper_bound("a\U0010ffff") is None


def test_open_view_store_takes_sqlite_urls(tmp_path: Path) -> None:
    store = open_view_store(f"sqlite:///{tmp_path}/views.db")
    try:
        assert isinstance(store, SQLiteViewStore)
        assert store.path == f"{tmp_path}/views.db"
    finally:
        store.close()
    with pytest.raises(ValueError, match="unsupported"):
        open_view_store("mysql://x")


def test_postgres_url_parameters_for_us_are_removed_before_libpq_sees_them() -> None:
    url = "postgresql://u:p%40ss@h:5433/db?schema=views&sslmode=disable&table_prefix=t_"
    pg = parse_postgres_url(url)
    assert (pg.conninfo, pg.schema, pg.table_prefix) == (
        "postgresql://u:p%40ss@h:5433/db?sslmode=disable",
        "views",
        "t_",
    )
    assert (pg.host, pg.port, pg.user, pg.password, pg.dbname) == ("h", 5433, "u", "p@ss", "db")
    assert "p@ss" not in repr(pg)
    assert pg.with_search_path().endswith("sslmode=disable&options=-csearch_path%3Dviews")
    bare = parse_postgres_url("postgresql://u@h/db")
    assert (bare.conninfo, bare.schema, bare.table_prefix, bare.port) == (
        "postgresql://u@h/db",
        "public",
        "",
        5432,
    )


def test_sqlite_reads_are_safe_from_many_threads(tmp_path: Path) -> None:
    store = SQLiteViewStore(str(tmp_path / "views.db"))
    with store.batch("v") as b:
        for i in range(50):
            b.put("o", f"{i:03d}", {"i": i, "at": datetime(2025, 1, 1, tzinfo=UTC)})
    errors: list[BaseException] = []

    def read() -> None:
        try:
            for _ in range(20):
                assert len(store.list("v", "o")) == 50
                assert store.get("v", "o", "007") == {"i": 7, "at": "2025-01-01T00:00:00Z"}
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=read) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    store.close()
    assert errors == []


def test_the_sqlite_view_database_uses_wal(tmp_path: Path) -> None:
    store = SQLiteViewStore(str(tmp_path / "views.db"))
    conn = store.acquire()
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        store.release(conn)
        store.close()


def test_sqlite_list_text_reads_again_after_any_write_and_only_then(tmp_path: Path) -> None:
    path = str(tmp_path / "views.db")
    store, other = SQLiteViewStore(path), SQLiteViewStore(path)
    with store.batch("v") as b:
        b.put("o", "run:1", {"n": 1})
        b.put("p", "run:1", {"n": 100})
    first = store.list_text("v", "o", "run:")
    assert first == [("run:1", '{"n":1}')]
    again = store.list_text("v", "o", "run:")
    assert again == first and again is not first  # a list of its own to each caller
    assert again[0][1] is first[0][1]  # unchanged database: the texts read before
    assert store.list_text("v", "p", "run:") == [("run:1", '{"n":100}')]  # keyed by organization
    with store.batch("v") as b:  # the same (only) pooled connection writes: total_changes
        b.put("o", "run:2", {"n": 2})
    assert store.list_text("v", "o", "run:") == [("run:1", '{"n":1}'), ("run:2", '{"n":2}')]
    with other.batch("v") as b:  # another connection commits: data_version
        b.put("o", "run:1", {"n": 3})
    assert store.list_text("v", "o", "run:") == [("run:1", '{"n":3}'), ("run:2", '{"n":2}')]
    bulk = other.replace_views(["v"])
    bulk.write("v", [("o", "run:9", '{"n":9}')])
    bulk.commit({"v": 1})
    assert store.list_text("v", "o", "run:") == [("run:9", '{"n":9}')]
    assert store.list_text("v", "p", "run:") == []
    store.close()
    other.close()
