"""`dumps` and `canonical` take orjson's fast path only where it writes what the standard
encoders write: documents, digests and the audit chain's hashes must not change by a byte."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from enum import Enum, IntEnum
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from projections.store import base
from projections.store.base import _orjson_safe, canonical, dumps, encoders_for
from projections.store.bulk import RebuildBatch
from projections.store.sqlite import SQLiteViewStore


class Colour(Enum):
    RED = "red"


class Level(IntEnum):
    HIGH = 3


class Text(str):
    pass


def _standard(doc: Any) -> tuple[str, str]:
    return base._STD_DUMPS(doc), base._STD_CANONICAL(doc)


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),  # beyond 64 bits too: orjson refuses those
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(),  # lone surrogates included: orjson refuses those
    st.decimals(allow_nan=False, allow_infinity=False),
    st.datetimes(timezones=st.sampled_from([None, UTC, timezone(timedelta(hours=2))])),
    st.dates(),
    st.uuids(),
    st.sampled_from([Colour.RED, Level.HIGH, Text("sub"), frozenset({"b", "a"})]),
)
docs = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=6), inner, max_size=4),
        st.dictionaries(st.integers(), inner, max_size=2),  # non-str keys: the standard path
    ),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=6), docs, max_size=5))
def test_fast_encoding_writes_exactly_what_the_standard_encoders_write(doc: dict[str, Any]) -> None:
    assert (dumps(doc), canonical(doc)) == _standard(doc)


@pytest.mark.parametrize(
    "value",
    [1e-05, 1.5e-07, 1e16, 1.2e300, float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1e-4],
)
def test_floats_python_writes_with_an_exponent_keep_python_s_text(value: float) -> None:
    doc = {"x": [value, {"y": value}]}
    assert (dumps(doc), canonical(doc)) == _standard(doc)


@pytest.mark.parametrize(
    "doc",
    [
        {"k": 2**64},  # orjson refuses ints beyond 64 bits
        {"k": "\ud800"},  # and lone surrogates
        {"k": {2: "a", 1: "b"}},  # and non-str keys
        {"k": Colour.RED, "l": Level.HIGH, "t": Text("x"), "s": {"b", "a"}},  # subclasses, sets
    ],
)
def test_what_orjson_refuses_or_writes_otherwise_goes_to_the_standard_encoders(
    doc: dict[str, Any],
) -> None:
    assert (dumps(doc), canonical(doc)) == _standard(doc)


def test_the_fast_path_is_taken_for_the_types_events_carry() -> None:
    doc = {
        "at": datetime(2026, 1, 2, 3, 4, 5, 600, tzinfo=UTC),
        "day": date(2026, 1, 2),
        "id": UUID(int=5),
        "price": Decimal("0.44"),
        "n": [1, 2.5, None, True, ("a", "é")],
        "nested": {"z": 1, "a": {"b": []}},
    }
    assert _orjson_safe(doc)
    assert (dumps(doc), canonical(doc)) == _standard(doc)
    assert json.loads(canonical(doc)) == json.loads(dumps(doc))
    assert not _orjson_safe({"x": [{1e-5}]})
    assert not _orjson_safe({"x": [1e-5]})


def test_objects_neither_encoder_knows_are_still_refused() -> None:
    with pytest.raises(TypeError):
        dumps({"x": [object()]})


def test_encoders_for_a_state_it_cannot_vouch_for_are_the_standard_ones() -> None:
    doc_text, record_text = encoders_for({"lr": 5e-05, "at": "x"})
    doc = {"data": {"lr": 5e-05}, "n": 1}
    assert (
        (doc_text(doc), record_text(doc)) == _standard(doc) == ('{"data":{"lr":5e-05},"n":1}',) * 2
    )
    doc_text, record_text = encoders_for({"lr": 0.5, "at": "x"})
    doc = {"n": 1, "data": {"lr": 0.5}}
    assert (doc_text(doc), record_text(doc)) == _standard(doc)


def test_a_text_handed_with_a_document_is_written_until_the_document_is_replaced(
    tmp_path: Path,
) -> None:
    store = SQLiteViewStore(str(tmp_path / "v.db"))
    try:
        with store.batch("v") as b:
            b.put_encoded("o", "kept", {"a": 1}, '{"a":1}')
            b.put_encoded("o", "replaced", {"a": 1}, '{"a":1}')
            b.put("o", "replaced", {"a": 2})
            b.put_encoded("o", "deleted", {"a": 1}, '{"a":1}')
            b.delete("o", "deleted")
            b.set_position(1)
        assert store.get("v", "o", "kept") == {"a": 1}
        assert store.get("v", "o", "replaced") == {"a": 2}
        assert store.get("v", "o", "deleted") is None
        rebuild = RebuildBatch("v")
        rebuild.put_encoded("o", "k", {"a": 1}, '{"a":1}')
        rebuild.put_encoded("o", "r", {"a": 1}, '{"a":1}')
        rebuild.put("o", "r", {"a": 3})
        rebuild.settle()
        assert list(rebuild.documents()) == [("o", "k", '{"a":1}'), ("o", "r", '{"a":3}')]
        rebuild.put("o", "k", {"a": 4})  # a later page rewrites it: encoded anew
        rebuild.settle()
        assert list(rebuild.documents()) == [("o", "k", '{"a":4}'), ("o", "r", '{"a":3}')]
    finally:
        store.close()
