"""The view store interface shared by the SQLite and PostgreSQL implementations.

A view is a set of JSON documents addressed by (org_id, key) plus one tracking position: the
notification id of the last event applied. Writes only happen through a `ViewBatch`, which holds
an in-memory working set and flushes it together with the new position in one transaction.
"""

from __future__ import annotations

import hashlib
import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from enum import Enum
from types import TracebackType
from typing import Any, Self, TypeVar
from uuid import UUID

import anyio.to_thread
import orjson

from domain.times import iso

Doc = dict[str, Any]
DocKey = tuple[str, str]
# The org_id of documents no organization owns: indexes from ids that later events do not
# repeat to their organization, members by token hash.
INDEX = "_"
R = TypeVar("R")
# Aliases, because the `list` methods below shadow the builtin inside the class bodies.
KeyedDocs = list[tuple[str, Doc]]
KeyedTexts = list[tuple[str, str]]
OrgKeyedDocs = list[tuple[str, str, Doc]]
DocText = tuple[str, str, str]  # (org_id, key, the document's JSON text)
Upserts = list[DocText]
DocKeys = list[DocKey]
JsonTexts = list[str]
Changes = tuple[Upserts, DocKeys]


@dataclass(frozen=True)
class Follow:
    """How a document names another one: the other's view, its org_id in one field, its key as
    `key_prefix` + another field. The fields hold strings (a store may compare their JSON text)."""

    view: str
    org_field: str
    key_field: str
    key_prefix: str = ""

    def address(self, doc: Doc) -> DocKey | None:
        """(org_id, key) of the document `doc` names, or None when a field is missing."""
        org_id, key = doc.get(self.org_field), doc.get(self.key_field)
        if org_id is None or key is None:
            return None
        return str(org_id), self.key_prefix + str(key)


class ViewBusyError(RuntimeError):
    """Another instance holds this view's write lock (raised only by `batch(..., wait=False)`)."""


class ConcurrentApplyError(RuntimeError):
    """The tracking position moved under a batch: committing would apply events twice."""


def _datetime(value: datetime) -> str:
    return value.isoformat() if value.tzinfo is None else iso(value)


_ENCODERS: tuple[tuple[type | tuple[type, ...], Any], ...] = (
    (Decimal, str),
    (datetime, _datetime),
    (date, date.isoformat),
    (UUID, str),
    (Enum, lambda v: v.value),
    ((set, frozenset), lambda v: sorted(v, key=str)),
)


# The exact classes met most (a timestamp in every event, Decimal prices), found by one lookup;
# subclasses still go through the isinstance checks in `_ENCODERS` order.
_EXACT: dict[type, Any] = {Decimal: str, datetime: _datetime, date: date.isoformat, UUID: str}


def _default(value: object) -> Any:
    encode = _EXACT.get(type(value))
    if encode is not None:
        return encode(value)
    for types, encode in _ENCODERS:
        if isinstance(value, types):
            return encode(value)
    msg = f"{type(value).__name__} is not JSON serialisable"
    raise TypeError(msg)


# Built once: json.dumps with non-default arguments builds a new encoder on every call.
_STD_DUMPS = json.JSONEncoder(default=_default, ensure_ascii=False, separators=(",", ":")).encode
_STD_CANONICAL = json.JSONEncoder(
    default=_default, ensure_ascii=False, separators=(",", ":"), sort_keys=True
).encode

# orjson writes what the encoders above write (compact, UTF-8, keys sorted by code point) for
# str, int, bool, None, dict, list and tuple, UUID and date, and hands datetimes to `_default`;
# it differs for floats that Python writes with an exponent (|x| < 1e-4 or >= 1e16: 1e-05 vs
# 0.00001), NaN and infinities, and it refuses what the standard library accepts (non-str keys,
# ints beyond 64 bits, lone surrogates). `_orjson_safe` lets only documents made of types it
# writes alike through; everything else, and whatever orjson refuses, goes to the standard
# encoders, so the text (documents, digests, the audit chain's hashes) stays byte for byte the
# same.
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
_ORJSON_CANONICAL = _ORJSON_OPTIONS | orjson.OPT_SORT_KEYS
_SCALARS = frozenset({str, int, bool, type(None), Decimal, datetime, date, UUID})
_KNOWN = _SCALARS | {dict, list, tuple, float}


def float_alike(value: float) -> bool:
    """Whether orjson writes this float as the standard encoder does (NaN and infinities fail
    the comparisons too)."""
    return value == 0.0 or 1e-4 <= abs(value) < 1e16


def _orjson_safe(doc: dict[str, Any] | list[Any] | tuple[Any, ...]) -> bool:
    """Whether orjson encodes `doc` exactly as the standard encoders do (see above)."""
    values: Iterable[Any] = doc.values() if type(doc) is dict else doc
    kinds = set(map(type, values))  # in C: most documents hold scalars only
    if kinds <= _SCALARS:
        return True
    if not kinds <= _KNOWN:
        return False  # sets, enums, subclasses: left to the standard encoders
    for value in values:
        t = type(value)
        if t is float:
            if not float_alike(value):
                return False
        elif (t is dict or t is list or t is tuple) and not _orjson_safe(value):
            return False
    return True


def _orjson_encoder(options: int, standard: Callable[[Any], str]) -> Callable[[Any], str]:
    """orjson's text of a document `_orjson_safe` accepted (the standard one if orjson balks)."""
    fast = orjson.dumps

    def encode(doc: Any) -> str:
        try:
            return fast(doc, default=_default, option=options).decode()
        except orjson.JSONEncodeError:  # non-str keys, ints beyond 64 bits, lone surrogates
            return standard(doc)

    return encode


def _encoder(fast: Callable[[Any], str], standard: Callable[[Any], str]) -> Callable[[Doc], str]:
    safe = _orjson_safe

    def encode(doc: Doc) -> str:
        return fast(doc) if safe(doc) else standard(doc)

    return encode


_CHECKED_DUMPS = _orjson_encoder(_ORJSON_OPTIONS, _STD_DUMPS)
_CHECKED_CANONICAL = _orjson_encoder(_ORJSON_CANONICAL, _STD_CANONICAL)
_DUMPS = _encoder(_CHECKED_DUMPS, _STD_DUMPS)
_CANONICAL = _encoder(_CHECKED_CANONICAL, _STD_CANONICAL)


def encoders_for(doc: Doc) -> tuple[Callable[[Doc], str], Callable[[Doc], str]]:
    """(dumps, canonical) for documents built from `doc`'s values plus str, int and None.

    Checks `doc` once, so a view that encodes several documents made of the same values (the
    audit view: the hashed record and the event's document) does not check each of them.
    """
    if _orjson_safe(doc):
        return _CHECKED_DUMPS, _CHECKED_CANONICAL
    return _STD_DUMPS, _STD_CANONICAL


def dumps(doc: Doc) -> str:
    """Encode a document; accepts Decimal, datetime (UTC as ...Z), date, UUID, Enum and sets."""
    return _DUMPS(doc)


def canonical(doc: Doc) -> str:
    """The canonical text of a document (sorted keys), used for digests."""
    return _CANONICAL(doc)


def digest_rows(rows: Iterable[tuple[str, str, Doc]]) -> str:
    """sha256 over (org_id, key, canonical doc) rows, which must come in (org_id, key) order."""
    h = hashlib.sha256()
    for org_id, key, doc in rows:
        h.update(f"{org_id}\x00{key}\x00{canonical(doc)}\n".encode())
    return h.hexdigest()


def string_at(doc: Any, path: Sequence[str]) -> str | None:
    """The string at `path` (keys, outermost first) in a decoded document, or None when a step
    is missing or the value is not a string (what `list_text_where` compares)."""
    value: Any = doc
    for step in path:
        value = value.get(step) if isinstance(value, dict) else None
    return value if isinstance(value, str) else None


def prefix_upper_bound(prefix: str) -> str | None:
    """The smallest string greater than every string starting with `prefix` (codepoint order)."""
    if not prefix or ord(prefix[-1]) >= 0x10FFFF:
        return None
    return prefix[:-1] + chr(ord(prefix[-1]) + 1)


class ViewBatch(ABC):
    """One write transaction on one view: a working set flushed with the position at exit.

    `get` returns the working copy of a document; call `put` after changing it. Nothing reaches
    the database unless the `with` block exits without an exception.
    """

    def __init__(self, view: str, position: int) -> None:
        self.view = view
        self._start_position = position
        self._position = position
        self._work: dict[DocKey, Doc | None] = {}
        self._dirty: set[DocKey] = set()
        self._texts: dict[DocKey, str] = {}  # from `put_encoded`

    @property
    def position(self) -> int:
        """The view's tracking position (as read inside this transaction, or as set since)."""
        return self._position

    def set_position(self, position: int) -> None:
        """Record the notification id of the last event this batch applied."""
        if position < self._position:
            msg = f"position of view {self.view!r} cannot go back ({position} < {self._position})"
            raise ValueError(msg)
        self._position = position

    def get(self, org_id: str, key: str) -> Doc | None:
        """The document, seeing this batch's own writes."""
        k = (org_id, key)
        try:
            return self._work[k]
        except KeyError:
            pass
        self._work.update(self._load([k]))
        return self._work.setdefault(k, None)

    def prefetch(self, keys: Iterable[DocKey]) -> None:
        """Load many documents into the working set with one query."""
        missing = list({k for k in keys if k not in self._work})
        if missing:
            found = self._load(missing)
            for k in missing:
                self._work[k] = found.get(k)

    def seed(self, docs: dict[DocKey, Doc | None]) -> None:
        """Start from documents known to be current (the engine's cache of the last batch)."""
        self._work.update(docs)

    def working_set(self) -> dict[DocKey, Doc | None]:
        """Every document this batch read or wrote, as it will be after commit."""
        return self._work

    def put(self, org_id: str, key: str, doc: Doc) -> None:
        """Create or replace a document."""
        k = (org_id, key)
        self._work[k] = doc
        self._dirty.add(k)
        if self._texts:
            self._texts.pop(k, None)

    def put_encoded(self, org_id: str, key: str, doc: Doc, text: str) -> None:
        """Create or replace a document whose `dumps` text the caller has already (`doc` must
        not change afterwards; a later `put` or `delete` of the key forgets `text`)."""
        k = (org_id, key)
        self._work[k] = doc
        self._dirty.add(k)
        self._texts[k] = text

    def text_of(self, k: DocKey, doc: Doc) -> str:
        """The JSON text to write for a document of this batch."""
        text = self._texts.get(k) if self._texts else None
        return _DUMPS(doc) if text is None else text

    def delete(self, org_id: str, key: str) -> None:
        """Delete a document (no error if absent)."""
        k = (org_id, key)
        self._work[k] = None
        self._dirty.add(k)
        if self._texts:
            self._texts.pop(k, None)

    def list(self, org_id: str, prefix: str = "") -> KeyedDocs:
        """Documents of an organization whose key starts with `prefix`, in key order."""
        merged = dict(self._load_prefix(org_id, prefix))
        # Under the view's lock the working set is authoritative for the keys it holds.
        for (o, key), doc in self._work.items():
            if o == org_id and key.startswith(prefix):
                if doc is None:
                    merged.pop(key, None)
                else:
                    merged[key] = doc
        return sorted(merged.items())

    def changes(self) -> Changes:
        """(upserts as (org_id, key, json), deletes) to flush."""
        upserts: Upserts = []
        deletes: DocKeys = []
        work, encode = self._work, self.text_of
        for k in self._dirty:
            doc = work[k]
            if doc is None:
                deletes.append(k)
            else:
                upserts.append((k[0], k[1], encode(k, doc)))
        return upserts, deletes

    @property
    def start_position(self) -> int:
        """The position read when the batch began (the flush checks it is still current)."""
        return self._start_position

    @abstractmethod
    def _load(self, keys: DocKeys) -> dict[DocKey, Doc]:
        """Read documents from the database inside this transaction."""

    @abstractmethod
    def _load_prefix(self, org_id: str, prefix: str) -> Iterator[tuple[str, Doc]]:
        """Read an organization's documents by key prefix inside this transaction."""

    def __enter__(self) -> Self:
        return self

    @abstractmethod
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Flush and commit, or roll back when the block raised."""


class BulkWriter(ABC):
    """One transaction that replaces whole views (a rebuild).

    Opening it takes the views' write locks (in a stable order) and deletes their documents and
    positions; the locks are held until `commit` or `rollback`, so live batches of those views
    wait and then continue from the rebuilt position, and readers see the old views until the
    commit. `write` takes each view's documents once.
    """

    @abstractmethod
    def write(self, view: str, documents: Iterable[DocText]) -> None:
        """Bulk-load the view's documents, (org_id, key, JSON text) in key order."""

    @abstractmethod
    def commit(self, positions: dict[str, int]) -> None:
        """Record each view's position and commit."""

    @abstractmethod
    def rollback(self) -> None:
        """Abandon everything; the views are as they were."""


class ViewStore(ABC):
    """A document store for views; reads are thread-safe and need no transaction."""

    # Reads are local and take microseconds (an embedded file, no network round trip): a reader
    # may do them on its event loop rather than hand them to a thread (the API does).
    local_reads = False

    @abstractmethod
    def get(self, view: str, org_id: str, key: str) -> Doc | None:
        """One document or None."""

    def get_many(self, view: str, org_id: str, keys: Sequence[str]) -> dict[str, Doc]:
        """The documents of `keys` that exist, by key. A store may read them in one statement
        (one round trip instead of one per key)."""
        found: dict[str, Doc] = {}
        for key in keys:
            doc = self.get(view, org_id, key)
            if doc is not None:
                found[key] = doc
        return found

    def get_followed(
        self, view: str, org_id: str, key: str, follow: Follow
    ) -> tuple[Doc | None, Doc | None]:
        """A document and the one it names (`follow`), each None when missing. A store may read
        both in one statement (one round trip instead of two)."""
        doc = self.get(view, org_id, key)
        if doc is None:
            return None, None
        address = follow.address(doc)
        return doc, None if address is None else self.get(follow.view, *address)

    def get_followed_later(
        self, view: str, org_id: str, key: str, follow: Follow
    ) -> Callable[[], tuple[Doc | None, Doc | None]]:
        """`get_followed`, whose answer is taken by calling what this returns. Inside
        `one_connection` a store may send the query now and read its answer with the next
        query's (one round trip for both); this one reads at once."""
        found = self.get_followed(view, org_id, key, follow)
        return lambda: found

    def get_later(self, view: str, org_id: str, key: str) -> Callable[[], Doc | None]:
        """`get`, answered when called (as `get_followed_later`)."""
        found = self.get(view, org_id, key)
        return lambda: found

    def get_many_later(
        self, view: str, org_id: str, keys: Sequence[str]
    ) -> Callable[[], dict[str, Doc]]:
        """`get_many`, answered when called (as `get_followed_later`)."""
        found = self.get_many(view, org_id, keys)
        return lambda: found

    def list_later(self, view: str, org_id: str, prefix: str = "") -> Callable[[], KeyedDocs]:
        """`list` (all of them), answered when called (as `get_followed_later`)."""
        found = self.list(view, org_id, prefix)
        return lambda: found

    def one_connection(self) -> AbstractContextManager[None]:
        """A block whose reads (on this thread) share one connection, queries sent together
        where they can be (`get_followed_later`): a request's reads in one round trip. A local
        store has nothing to share."""
        return nullcontext()

    async def read_async(self, read: Callable[..., R], *args: Any) -> R:
        """`read(*args)` for a coroutine (the API's GETs): `read` does reads of this store and
        of those sharing its connection (`one_connection`), then builds its answer. On the
        event loop when reads are local (microseconds: less than a hand-off to a thread), else
        in a worker thread, so the loop never blocks on a round trip; a remote store may await
        its round trips on the loop instead (PostgreSQL: `projections.store.on_loop`)."""
        if self.local_reads:
            return read(*args)
        return await anyio.to_thread.run_sync(read, *args)

    @abstractmethod
    def list(
        self,
        view: str,
        org_id: str,
        prefix: str = "",
        after: str | None = None,
        limit: int | None = None,
    ) -> KeyedDocs:
        """An organization's documents in key order, filtered by prefix, keyset-paginated."""

    def list_json(self, view: str, org_id: str, prefix: str) -> JsonTexts:
        """The JSON texts of an organization's documents whose key starts with `prefix`, in key
        order: for readers that parse many documents at once (pyarrow's JSON reader)."""
        return [text for _, text in self.list_text(view, org_id, prefix)]

    def list_json_lines(self, view: str, org_id: str, prefix: str) -> bytes:
        """`list_json` as newline-delimited JSON in UTF-8 (b"" for none), what pyarrow's JSON
        reader reads. A store may make it without a Python object per document."""
        return "\n".join(self.list_json(view, org_id, prefix)).encode()

    @abstractmethod
    def list_text(self, view: str, org_id: str, prefix: str = "") -> KeyedTexts:
        """`list` without decoding: (key, the document's JSON text), in key order. Equal
        documents give equal texts on one store (what a reader may key a cache of its own on)."""

    def list_text_where(
        self, view: str, org_id: str, prefix: str, path: Sequence[str], values: Sequence[str]
    ) -> KeyedTexts:
        """`list_text` of the documents whose string at `path` (keys, outermost first) is one of
        `values`. A store may filter in the database, so the others are never fetched."""
        wanted = set(values)
        return [
            (key, text)
            for key, text in self.list_text(view, org_id, prefix)
            if string_at(json.loads(text), path) in wanted
        ]

    @abstractmethod
    def iter_all(self, view: str) -> Iterator[tuple[str, str, Doc]]:
        """Every (org_id, key, doc) of a view in (org_id, key) order."""

    def list_all(self, view: str) -> OrgKeyedDocs:
        """Every (org_id, key, doc) of a view in (org_id, key) order."""
        return list(self.iter_all(view))

    def digest(self, view: str) -> str:
        """sha256 of a view's documents; equal digests mean equal views (names aside)."""
        return digest_rows(self.iter_all(view))

    @abstractmethod
    def position(self, view: str) -> int:
        """The notification id of the last event applied to the view (0 if none)."""

    @abstractmethod
    def batch(self, view: str, *, wait: bool = True) -> ViewBatch:
        """A write transaction holding the view's lock (waits for it, or ViewBusyError)."""

    @abstractmethod
    def replace_views(self, views: Sequence[str]) -> BulkWriter:
        """A transaction that empties `views` and writes them anew (see `BulkWriter`)."""

    @abstractmethod
    def reset(self, view: str) -> None:
        """Delete a view's documents and tracking position (under the view's lock)."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
