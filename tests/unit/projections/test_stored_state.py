"""`StoredLog.state` reads an event's stored state as the text `canonical` writes
for the decoded state (what the audit chain hashes), or says None where it cannot be sure to:
never a different text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.persistence import (
    DatetimeAsISO,
    DecimalAsStr,
    JSONTranscoder,
    Transcoding,
    UUIDAsHex,
)

from projections.store.base import canonical
from projections.store.logscan import StoredLog

ID = UUID("2f4c1d6e-8a3b-4c5d-9e7f-0a1b2c3d4e5f")
AT = datetime(2026, 12, 6, 4, 30, 15, 123456, tzinfo=UTC)


class Point:
    def __init__(self, x: int) -> None:
        self.x = x


class PointAsInt(Transcoding):
    type = Point
    name = "point"

    def encode(self, obj: Point) -> int:
        return obj.x

    def decode(self, data: int) -> Point:
        return Point(data)


def _transcoder() -> JSONTranscoder:
    t = JSONTranscoder()
    for transcoding in (UUIDAsHex(), DecimalAsStr(), DatetimeAsISO(), PointAsInt()):
        t.register(transcoding)
    return t


TRANSCODER = _transcoder()

READ = {  # states read from their bytes
    "scalars": {"a": 1, "b": "x", "c": True, "d": None, "e": -0.0, "f": 2.5},
    "every library value": {"at": AT, "price": Decimal("1.50"), "id": ID},
    "an exponent Decimal": {"price": Decimal("1E+2"), "neg": Decimal("-0.000001")},
    "no microseconds": {"at": datetime(2026, 1, 1, tzinfo=UTC)},
    "another zone": {"at": datetime(2026, 1, 1, 12, tzinfo=timezone(timedelta(hours=2)))},
    "a naive time": {"at": datetime(2026, 1, 1, 12, 0, 1)},
    "nested": {"rows": [{"p": Decimal("0.1"), "ids": [ID, ID]}, [AT]], "z": {"y": {"x": 1}}},
    "text": {"s": 'quote " back \\ tab \t é \u2028 😀', "keys": {"b": 1, "a": 2, "é": 3}},
    "floats orjson writes alike": {"f": [0.0001, 1e15, 123456789.125]},
    "a user dict holding _type_": {"d": {"_type_": "x", "_data_": 1, "k": 2}},
    "ints of 64 bits": {"n": [2**64 - 1, -(2**63), 0]},
}
NOT_READ = {  # states left to the mapper (None), as the docstring says
    "a small float": {"f": 1e-05},
    "a big float": {"f": 1e16},
    "an int beyond 64 bits": {"n": 2**70},
    "another transcoding": {"p": Point(3)},
    "a class version": {"class_version": 2, "a": 1},
    "an originator id": {"originator_id": "x"},
    "another transcoding within a list": {"rows": [1, {"p": Point(3)}]},
    "a big float within a dict": {"d": {"e": [1e300]}},
}


def _stored(state: dict[str, Any]) -> bytes:
    return TRANSCODER.encode(state)


@pytest.mark.parametrize("state", READ.values(), ids=READ.keys())
def test_a_state_reads_as_canonical_writes_its_decoded_state(state: dict[str, Any]) -> None:
    stored = _stored(state)
    read = StoredLog.state(stored)
    decoded = TRANSCODER.decode(stored)
    assert read is not None
    values, text = read
    assert text == canonical(decoded)
    assert canonical(values) == text


@pytest.mark.parametrize("state", NOT_READ.values(), ids=NOT_READ.keys())
def test_a_state_it_cannot_be_sure_of_is_left_to_the_mapper(state: dict[str, Any]) -> None:
    assert StoredLog.state(_stored(state)) is None


@pytest.mark.parametrize(
    "stored",
    [
        # the transcoder reads a two-key dict in either order, with escapes in its data,
        # spaces between its tokens, a key twice, a number written -0
        b'{"a":{"_data_":"' + ID.hex.encode() + b'","_type_":"uuid_hex"}}',
        b'{"a":{"_type_":"decimal_str","_data_":"1\\u002e5"}}',
        b'{ "a" : [ { "_type_" : "datetime_iso" , "_data_" : "2026-12-06T01:02:03+01:00" } ] }',
        b'{"a":1,"a":{"_type_":"decimal_str","_data_":" 1_000.50 "},"b":-0}',
        # a dict of two keys, one of them _type_, is not a transcoded object
        b'{"a":{"_type_":"uuid_hex","data":"x"}}',
    ],
)
def test_a_state_not_as_the_transcoder_writes_it_reads_as_it_decodes(stored: bytes) -> None:
    read = StoredLog.state(stored)
    assert read is not None
    assert read[1] == canonical(TRANSCODER.decode(stored))


@pytest.mark.parametrize(
    "stored",
    [
        # values the transcoder cannot read: the mapper raises its own error for them
        b'{"a":{"_type_":"decimal_str","_data_":"one"}}',
        b'{"a":{"_type_":"datetime_iso","_data_":"2026-13-01T00:00:00+00:00"}}',
        b'{"a":{"_type_":"uuid_hex","_data_":"xyz"}}',
        b'{"a":NaN}',
        b'{"a":"\\ud800"}',
        b"[1,2]",
        b"{not json",
        # a state that is itself a transcoded object, or whose data is not text
        b'{"_type_":"decimal_str","_data_":"1"}',
        b'{"a":{"_type_":"decimal_str","_data_":["1"]}}',
        b'{"a":{"_type_":["uuid_hex"],"_data_":"1"}}',
        b'{"a":' * 1020 + b"1" + b"}" * 1020,  # deeper than Python lets the reader walk
    ],
)
def test_what_only_the_library_decoder_reads_alike_is_left_to_it(stored: bytes) -> None:
    assert StoredLog.state(stored) is None
