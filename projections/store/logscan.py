"""Reading the whole log for a rebuild: the library's events, read in less time.

A rebuild reads every notification once. The library's `select_notifications` makes a dict row
and a `Notification` per row and copies the state's bytes: on PostgreSQL 5.9 µs of CPU per
event (1M events, bench/projection_rebuild.py), more than the mapper's decode after it (4.1).
The read below is one binary-mode statement with tuple rows (1.2 µs; on SQLite one SELECT
without the library's BEGIN and ROLLBACK around it); each row is decoded by the mapper's
steps, without a `StoredEvent` per row when the mapper has no cipher and no compressor
(`row_decoder`, 0.9 µs less), so the events are the library's. (orjson's decode plus a Python
walk reviving the transcoder's `_type_` objects was tried: 6.8 µs, slower than the standard
decoder's `object_hook`.)

A projection that needs only the JSON text of an event's state (the audit view hashes its
canonical form) can take the rows undecoded (`keep_rows`, `StoredLog`): `StoredLog.state` gives
the state's values and canonical text from the stored bytes (orjson's decode, each transcoded
object replaced by its canonical text, found once per value, and orjson's sorted encode), and
says None where it cannot be sure to give the same (the projection then decodes the row).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import lru_cache
from typing import Any, cast
from uuid import UUID

import orjson
from eventsourcing.application import Application
from eventsourcing.persistence import (
    DatetimeAsISO,
    DecimalAsStr,
    JSONTranscoder,
    Mapper,
    StoredEvent,
    UUIDAsHex,
    find_id_convertor,
)
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.sqlite import SQLiteApplicationRecorder
from eventsourcing.utils import resolve_topic
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Identifier

from projections.store.base import _datetime, float_alike

# A row of the log as stored: (notification id, originator id, originator version, topic,
# state), the originator id as the recorder gives it (a UUID for a UUID column).
StoredRow = tuple[int, Any, int, str, bytes]
# One notification of a page: (notification id, topic, decoded event or None, its stored row
# or None). The event is None for a topic the scan was not asked to decode; the row is given
# only to a scan that keeps rows.
Read = tuple[int, str, Any, StoredRow | None]
# the page's notifications (those wanted or kept); the last id read; how many were read
Page = tuple[list[Read], int, int]
Scan = Callable[[int, int], Page]
# decodes a row (notification id, originator id, originator version, topic, state)
RowDecoder = Callable[[Sequence[Any]], Any]


def log_scan(
    app: Application[Any], wanted: frozenset[str] | None = None, *, keep_rows: bool = False
) -> Scan:
    """`scan(start, limit)`: the next `limit` notifications after `start`, decoding those
    whose topic is in `wanted` (all when None). Without `keep_rows`, the page holds only the
    decoded ones; with it, every notification with its stored row (for `StoredLog`; only
    where `stored_log(app)` is not None)."""
    recorder = app.recorder
    if type(recorder) is PostgresApplicationRecorder:
        return _postgres_scan(recorder, row_decoder(app.mapper), wanted, keep_rows)
    if type(recorder) is SQLiteApplicationRecorder:
        return _sqlite_scan(recorder, row_decoder(app.mapper), wanted, keep_rows)
    if keep_rows:
        msg = f"{type(recorder).__name__} gives no stored rows (see stored_log)"
        raise ValueError(msg)
    decode = app.mapper.to_domain_event

    def scan(start: int, limit: int) -> Page:
        found = recorder.select_notifications(start=start, limit=limit, inclusive_of_start=False)
        end = found[-1].id if found else start
        events: list[Read] = [
            (n.id, n.topic, decode(n), None) for n in found if wanted is None or n.topic in wanted
        ]
        return events, end, len(found)

    return scan


_LIBRARY_TRANSCODINGS = {
    "uuid_hex": UUIDAsHex,
    "decimal_str": DecimalAsStr,
    "datetime_iso": DatetimeAsISO,
}
# What the state of a decoded event never holds (the mapper sets or pops them).
_NOT_STATE = frozenset({"originator_id", "originator_version", "class_version"})
# The text `canonical` writes for the value each library transcoding decodes its data to.
_CANONICAL: dict[str, Callable[[str], str]] = {
    "datetime_iso": lambda data: _datetime(datetime.fromisoformat(data)),
    "decimal_str": lambda data: str(Decimal(data)),
    "uuid_hex": lambda data: str(UUID(data)),
}


def _canonical(kind: Any, data: Any) -> str | None:
    """What `canonical` writes for the value the transcoder decodes `{"_type_": kind,
    "_data_": data}` to, or None when that is not a library transcoding of a text, or its data
    does not decode (the mapper raises its own error for it)."""
    try:
        return _canonical_text(kind, data)
    except TypeError:  # data that is a list or a dict
        return None


# Kept by (transcoding, data): a log repeats them (ids, prices, the times of a command's
# events): bench/projection_rebuild.py's 1M events hold 1.36M transcoded values, of 53
# different ones per 200,000 events.
@lru_cache(maxsize=65_536)
def _canonical_text(kind: Any, data: Any) -> str | None:
    if type(data) is not str or type(kind) is not str or kind not in _CANONICAL:
        return None
    try:
        return _CANONICAL[kind](data)
    except (ValueError, ArithmeticError):
        return None


def _transcoded(value: dict[str, Any]) -> bool:
    """Whether the transcoder's decoder reads this dict as a transcoded object (its
    `_decode_obj`: two keys, `_type_` and `_data_`)."""
    return len(value) == 2 and "_type_" in value and "_data_" in value


def _read_in_place(values: dict[str, Any] | list[Any]) -> bool:
    """Replace, in `values` and the dicts and lists within, each transcoded object by the text
    `canonical` writes for its decoded value. False (`values` then half done) where that is
    not sure to give what `canonical` writes for the transcoder's decoding: a transcoding
    other than the library's, data that does not decode, a float orjson writes otherwise than
    the standard encoder (`_orjson_safe`); ints are those orjson read, within 64 bits."""
    items = values.items() if type(values) is dict else enumerate(values)
    for key, value in items:
        t = type(value)
        if t is str or t is int or t is bool or value is None:
            continue
        if t is dict:
            if _transcoded(value):
                text = _canonical(value["_type_"], value["_data_"])
                if text is None:
                    return False
                values[key] = text  # type: ignore[index] # a key of `values`
            elif not _read_in_place(value):
                return False
        elif t is list:
            if not _read_in_place(value):
                return False
        elif t is not float or not float_alike(value):
            return False
    return True


@dataclass(frozen=True)
class StoredLog:
    """Rows of a log whose mapper has no cipher and no compressor and whose transcoder is the
    library's JSON one: `decode(row)`, the mapper's event of a `StoredRow`, and `state`."""

    decode: RowDecoder

    @staticmethod
    def state(stored: bytes) -> tuple[dict[str, Any], str] | None:
        """From an event's stored state, what its decoded event's state (its attributes but
        the originator id and version) is as JSON: its values, with those of the transcoder's
        objects as the text `canonical` writes for them (a datetime's `...Z`, a Decimal's and
        a UUID's str), and their canonical text, byte for byte `canonical(state)`. None when
        the state holds what this cannot be sure to read alike (another transcoding, floats
        orjson writes otherwise, ints beyond 64 bits, lone surrogates, a `class_version`, a
        value the transcoder cannot read): decode the row instead.
        """
        try:
            values = orjson.loads(stored)
        except orjson.JSONDecodeError:  # NaN, lone surrogates, not UTF-8, not JSON
            return None
        if type(values) is not dict or _transcoded(values) or not _NOT_STATE.isdisjoint(values):
            return None
        try:
            if not _read_in_place(values):
                return None
            return values, orjson.dumps(values, option=orjson.OPT_SORT_KEYS).decode()
        except (RecursionError, orjson.JSONEncodeError):
            return None


def stored_log(app: Application[Any]) -> StoredLog | None:
    """The log's `StoredLog`, or None when its rows need more than the JSON transcoder to
    read (a cipher, a compressor, another transcoder) or its recorder gives no rows."""
    mapper = app.mapper
    if type(app.recorder) not in (PostgresApplicationRecorder, SQLiteApplicationRecorder):
        return None
    if mapper.cipher or mapper.compressor or type(mapper.transcoder) is not JSONTranscoder:
        return None
    names = mapper.transcoder.names
    if any(type(names.get(n)) is not t for n, t in _LIBRARY_TRANSCODINGS.items()):
        return None
    return StoredLog(row_decoder(mapper))


def events_at(app: Application[Any], positions: Sequence[int]) -> dict[int, Any]:
    """The log's events at these notification ids, decoded as the mapper does: what a reader
    of a view that keeps positions, not copies, shows (the audit view). An id the log no
    longer has, or whose stored bytes its mapper cannot decode (altered), is left out: the
    audit's `verify` reports both."""
    wanted = sorted(set(positions))
    if not wanted:
        return {}
    recorder = app.recorder
    if type(recorder) is PostgresApplicationRecorder:
        decode = row_decoder(app.mapper)
        statement = SQL(
            "SELECT notification_id, originator_id, originator_version, topic, state FROM {}"
            " WHERE notification_id = ANY(%s)"
        ).format(Identifier(recorder.datastore.schema, recorder.events_table_name))
        with (
            recorder.datastore.get_connection() as conn,
            conn.cursor(binary=True, row_factory=tuple_row) as c,
        ):
            c.execute(statement, (wanted,))
            rows = c.fetchall()
        return _decodable(rows, decode)
    if type(recorder) is SQLiteApplicationRecorder:
        decode = row_decoder(app.mapper, recorder.convert_originator_id)
        table = recorder.events_table_name.replace('"', '""')
        found: list[Any] = []
        with recorder.datastore.get_connection(commit=False) as lite, lite.cursor() as cur:
            for i in range(0, len(wanted), _SQLITE_VARIABLES):
                part = wanted[i : i + _SQLITE_VARIABLES]
                cur.execute(
                    f'SELECT rowid, originator_id, originator_version, topic, state FROM "{table}"'  # noqa: S608 - the recorder's own table
                    f" WHERE rowid IN ({','.join('?' * len(part))})",
                    part,
                )
                found += cur.fetchall()
        return _decodable(found, decode)
    decode_note = app.mapper.to_domain_event
    notes = recorder.select_notifications(
        start=wanted[0], limit=wanted[-1] - wanted[0] + 1, stop=wanted[-1]
    )
    keep = set(wanted)
    return _decodable([n for n in notes if n.id in keep], decode_note, id_of=_id)


def _id(note: Any) -> int:
    return int(note.id)


def _first(row: Sequence[Any]) -> int:
    return int(row[0])


def _decodable(
    rows: Sequence[Any], decode: Callable[[Any], Any], id_of: Callable[[Any], int] = _first
) -> dict[int, Any]:
    """{id: decoded} of the rows the decoder can decode."""
    found: dict[int, Any] = {}
    for row in rows:
        try:
            found[id_of(row)] = decode(row)
        except Exception:  # noqa: S112 - altered bytes: left out, as `events_at` says
            continue
    return found


# Bound parameters per statement: SQLite before 3.32 allows 999.
_SQLITE_VARIABLES = 900


def _postgres_scan(
    recorder: PostgresApplicationRecorder,
    decode: RowDecoder,
    wanted: frozenset[str] | None,
    keep_rows: bool,
) -> Scan:
    table = Identifier(recorder.datastore.schema, recorder.events_table_name)
    topics = None if wanted is None or keep_rows else sorted(wanted)
    if topics is None:
        statement = SQL(
            "SELECT notification_id, originator_id, originator_version, topic, state FROM {}"
            " WHERE notification_id > %s ORDER BY notification_id LIMIT %s"
        ).format(table)
    else:
        # Every row of the page still comes (its end and count are the page's), but only its
        # id for a topic not wanted: 0.35 s less of psycopg's CPU per 1M rows, of which 37%
        # unwanted (bench/projection_rebuild.py's second process).
        statement = SQL(
            "SELECT notification_id, CASE WHEN w THEN originator_id END, originator_version,"
            " CASE WHEN w THEN topic END, CASE WHEN w THEN state END FROM"
            " (SELECT notification_id, originator_id, originator_version, topic, state,"
            " topic = ANY(%s) AS w FROM {} WHERE notification_id > %s"
            " ORDER BY notification_id LIMIT %s) AS page"
        ).format(table)

    def scan(start: int, limit: int) -> Page:
        with (
            recorder.datastore.get_connection() as conn,
            conn.cursor(binary=True, row_factory=tuple_row) as c,
        ):
            params = (start, limit) if topics is None else (topics, start, limit)
            c.execute(statement, params, prepare=True)
            rows = c.fetchall()
        return _page(rows, start, decode, wanted, keep_rows)

    return scan


def _sqlite_scan(
    recorder: SQLiteApplicationRecorder,
    decode: RowDecoder,
    wanted: frozenset[str] | None,
    keep_rows: bool,
) -> Scan:
    table = recorder.events_table_name.replace('"', '""')
    statement = (
        f'SELECT rowid, originator_id, originator_version, topic, state FROM "{table}"'  # noqa: S608 - the recorder's own table
        " WHERE rowid > ? ORDER BY rowid LIMIT ?"
    )

    convert = recorder.convert_originator_id

    def scan(start: int, limit: int) -> Page:
        # one SELECT is atomic on its own: no BEGIN and ROLLBACK around it
        with recorder.datastore.get_connection(commit=False) as conn, conn.cursor() as c:
            c.execute(statement, (start, limit))
            rows = c.fetchall()
        return _page(rows, start, decode, wanted, keep_rows, convert)

    return scan


def _page(
    rows: Sequence[StoredRow],
    start: int,
    decode: RowDecoder,
    wanted: frozenset[str] | None,
    keep_rows: bool,
    convert: Callable[[Any], Any] | None = None,
) -> Page:
    """The page of `rows` (their originator ids read by `convert` first, when given: only
    those of the rows the page holds)."""
    end = rows[-1][0] if rows else start
    count = len(rows)
    if not keep_rows and wanted is not None:
        rows = [row for row in rows if row[3] in wanted]
    if convert is not None:
        rows = [(i, convert(o), v, t, s) for i, o, v, t, s in rows]
    events: list[Read]
    if not keep_rows:
        events = [(row[0], row[3], decode(row), None) for row in rows]
    elif wanted is None:
        events = [(row[0], row[3], decode(row), row) for row in rows]
    else:
        events = [(row[0], row[3], decode(row) if row[3] in wanted else None, row) for row in rows]
    return events, end, count


def _transcode(mapper: Mapper[Any]) -> Callable[[bytes], dict[str, Any]]:
    """The transcoder's `decode` of an event's state; for the library's JSON transcoder, its
    decoder's scanner called directly (what `JSONDecoder.decode` calls, without its two Python
    frames and whitespace checks): a state it does not read whole, as the transcoder wrote it,
    raises and goes through the mapper."""
    transcoder = mapper.transcoder
    if type(transcoder) is not JSONTranscoder:
        return cast(Callable[[bytes], dict[str, Any]], transcoder.decode)
    scan = cast(Any, transcoder.decoder).scan_once

    def decode(state: bytes) -> dict[str, Any]:
        text = state.decode("utf8")
        values, end = scan(text, 0)
        if end != len(text) or type(values) is not dict:
            raise ValueError(end)
        return cast(dict[str, Any], values)

    return decode


def row_decoder(mapper: Mapper[Any], convert_id: Callable[[Any], Any] | None = None) -> RowDecoder:
    """`decode(row)`: `mapper.to_domain_event` of the row's stored event (its originator id
    read by `convert_id` first, when given), the same steps without the `StoredEvent`; an
    event the transcoder cannot decode goes through the mapper, which raises its own error."""
    slow = mapper.to_domain_event
    if mapper.cipher or mapper.compressor:

        def stored(row: Sequence[Any]) -> Any:
            oid = convert_id(row[1]) if convert_id else row[1]
            return slow(StoredEvent(oid, row[2], row[3], row[4]))

        return stored
    transcode = _transcode(mapper)
    known: dict[tuple[str, type], tuple[Any, Callable[[Any], Any], int]] = {}

    def decode(row: Sequence[Any]) -> Any:
        _, oid, version, topic, state = row
        if convert_id is not None:
            oid = convert_id(oid)
        try:
            cls, convert, class_version = known[topic, type(oid)]
        except KeyError:
            cls = resolve_topic(topic)
            convert = find_id_convertor(cls, cast(Hashable, type(oid)))
            class_version = getattr(cls, "class_version", 1)
            known[topic, type(oid)] = cls, convert, class_version
        try:
            event_state: dict[str, Any] = transcode(state)
        except Exception:  # the mapper raises its own error for it
            return slow(StoredEvent(oid, version, topic, state))
        event_state["originator_id"] = convert(oid)
        event_state["originator_version"] = version
        if class_version != 1 or "class_version" in event_state:
            from_version = event_state.pop("class_version", 1)
            while from_version < class_version:
                getattr(cls, f"upcast_v{from_version}_v{from_version + 1}")(event_state)
                from_version += 1
        event = object.__new__(cls)
        object.__setattr__(event, "__dict__", event_state)
        return event

    return decode
