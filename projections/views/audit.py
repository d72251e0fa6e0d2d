"""The audit view (U1, U3): every event of an organization, in log order, in a hash chain.

Documents per organization: `chain` -> {head, count, position}, and for each stretch of BLOCK
notification ids holding its events, `b:<position // BLOCK, 16 digits>` -> {p: [positions],
h: [hashes]}: its entries there, in log order. An entry keeps its position and hash only; what
it says (time, type, aggregate, actor, data) is read from the log at that position when asked
(`entries`), as a run's history is. Index documents (org `_`): `agg:<aggregate id>` ->
{org_id, type}, because only an aggregate's created event names its organization, and
`layout` (`LAYOUT`: a view of an earlier layout is rebuilt when its projector starts).

hash = sha256(prev_hash || canonical(record)), record = {position, topic, originator_id,
originator_version, state}, where `state` is the event's decoded state (every attribute but
the originator id and version) in canonical JSON. Hashing the decoded state rather than the
stored bytes keeps the chain valid under the library's cipher or compression, and any byte
change that alters meaning changes it. `verify` re-reads the event store and recomputes.

The chain lives in the same database as the log, so someone who can write both could forge an
event and rebuild the view (`projections rebuild` recomputes the chain from the forged log).
Anchors close that gap: `verify` reports each organization's head (position, hash); kept
outside the database (an auditor's file, a ticket), a head given back to `verify` must still be
the recomputed hash at that position, else that position is reported bad.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from itertools import islice
from typing import Any

from eventsourcing.application import Application
from eventsourcing.persistence import find_id_convertor
from eventsourcing.utils import resolve_topic

from domain.errors import DomainError
from domain.ids import id_text
from domain.times import iso
from projections.store.base import (
    Doc,
    DocKey,
    ViewBatch,
    ViewStore,
    canonical,
    dumps,
    encoders_for,
)
from projections.store.logscan import StoredLog, StoredRow, events_at

AUDIT = "audit"
INDEX = "_"
GENESIS = "0" * 64
_HIDDEN = ("originator_id", "originator_version", "timestamp", "actor")
Anchor = tuple[int, str]  # (position, head hash) of one organization's chain
# Notification ids per block document. A block holds one organization's entries in that
# stretch of the log (at most BLOCK; 64 bytes of hash and a position each), is written once
# by a rebuild (whose pages are whole blocks) and rewritten by the live batches while the log
# is in its stretch.
BLOCK = 1000


class InvalidAnchor(DomainError):
    problem = "invalid-anchor"
    title = "The audit anchor is not valid"


def block_key(position: int) -> str:
    """Block n holds positions n * BLOCK + 1 to (n + 1) * BLOCK: a rebuild's page of
    REBUILD_BATCH_SIZE notifications from 1 is whole blocks."""
    return f"b:{(position - 1) // BLOCK:016d}"


def event_state(event: Any) -> dict[str, Any]:
    return {
        k: v for k, v in event.__dict__.items() if k not in ("originator_id", "originator_version")
    }


def record_text(
    position: int,
    topic: str,
    originator_id: str,
    version: int,
    state: dict[str, Any],
    encode: Callable[[Doc], str] = canonical,
) -> bytes:
    """The canonical text of an entry's record, which `chain_hash` hashes after the head.
    `encode`: `canonical`, or the canonical encoder `encoders_for(state)` chose."""
    record = {
        "position": position,
        "topic": topic,
        "originator_id": originator_id,
        "originator_version": version,
        "state": state,
    }
    return encode(record).encode()


def chain_hash(prev: str, record: bytes) -> str:
    """The hash of an entry: sha256 of the previous head and its record's canonical text."""
    return hashlib.sha256(prev.encode() + record).hexdigest()


def _topic(event: Any) -> str:
    return _topic_of(type(event))


def _agg_type(event: Any) -> str:
    return _agg_type_of(type(event))


_TOPICS: dict[type, str] = {}
_AGG_TYPES: dict[type, str] = {}


def _topic_of(cls: type) -> str:
    try:
        return _TOPICS[cls]
    except KeyError:
        t = _TOPICS[cls] = str(
            getattr(cls, "TOPIC", None) or f"{cls.__module__}:{cls.__qualname__}"
        )
        return t


def _agg_type_of(cls: type) -> str:
    try:
        return _AGG_TYPES[cls]
    except KeyError:
        pass
    found = cls.__qualname__.split(".")[0].lower()
    for base in cls.__mro__:
        t = getattr(base, "TOPIC", "")
        if t.startswith("tensorant.") and t.endswith(".Event"):
            found = t.removeprefix("tensorant.").removesuffix(".Event").lower()
            break
    _AGG_TYPES[cls] = found
    return found


def org_of(event: Any, index: Doc | None) -> str | None:
    """The event's organization: from the index, a created event's org_id, or itself."""
    if index is not None:
        return str(index["org_id"])
    org = getattr(event, "org_id", None)
    if org:
        return str(org)
    if _agg_type(event) == "organization":
        return id_text(event.originator_id)
    return None


class AuditView:
    """Events per organization with a per-organization sha256 chain."""

    name = AUDIT
    # 1: an `e:<position>` document per entry, with the event's data; 2: blocks of hashes
    layout = 2
    # What `share_views` splits by: CPU s per 1M events of bench/projection_rebuild's log to
    # decode the events of its topics (~10 µs each, none for this view: it reads stored rows)
    # and apply and encode them, every view measured in the same run, plus writing its
    # documents: 6.8 µs each, client and PostgreSQL (the bench's write floor, 1.08M in
    # 7.38 s); this view's 253,268 add 1.7. Without the writes, the audit's
    # process wrote 60% of the documents and ended 1.3-2.8 s after the other.
    rebuild_weight = 12.7

    def __init__(self) -> None:
        self._kinds: dict[tuple[str, type], _Kind] = {}
        self._kinds_of: StoredLog | None = None

    def keys(self, event: Any) -> Iterable[DocKey]:
        return [(INDEX, f"agg:{event.originator_id}")]

    def apply(self, batch: ViewBatch, event: Any, position: int) -> None:
        links = _Links(batch)
        self._apply_event(links, event, position)
        links.put()

    def _apply_event(self, links: _Links, event: Any, position: int) -> None:
        """`apply`, the entry added to `links` (put in the batch by the caller)."""
        cls = type(event)
        aid = id_text(event.originator_id)
        org_id = self._owner(links.batch, aid, _agg_type_of(cls), event, None)
        if org_id is None:
            return  # an event no organization owns (none exist today)
        hashed = event_state(event)
        if type(hashed.get("timestamp")) is datetime and event.timestamp.tzinfo is not None:
            # The text canonical() would write for it anyway (`iso`), from its memo.
            hashed["timestamp"] = iso(event.timestamp)
        # The record holds the state's values plus str and int: one check of the state picks
        # its encoder.
        encode = encoders_for(hashed)[1]
        version = int(event.originator_version)
        record = record_text(position, _topic_of(cls), aid, version, hashed, encode)
        links.add(org_id, position, record)

    def apply_stored(self, batch: ViewBatch, rows: Iterable[StoredRow], log: StoredLog) -> None:
        """`apply` of each row's event, in order, hashing the canonical text of its stored
        state (`StoredLog.state`) without decoding it; decodes a row where that says None.
        Over the rows, each organization's chain and current block are held here and put in
        the batch once at the end (the documents `apply` would leave): a get and two puts of
        the batch per event were a fifth of the audit's rebuild CPU."""
        if log is not self._kinds_of:  # what the topics resolve to, found once per rebuild
            self._kinds, self._kinds_of = {}, log
        kinds = self._kinds
        links = _Links(batch)
        # aggregate id -> (its organization, as `_owner` found it; its JSON text)
        owners: dict[str, tuple[str, str]] = {}
        for row in rows:
            position, oid, version, stored_topic, state = row
            try:
                kind = kinds[stored_topic, type(oid)]
            except KeyError:
                kind = kinds[stored_topic, type(oid)] = _kind(stored_topic, type(oid))
            read = log.state(state) if kind is not None else None
            if kind is None or read is None:
                self._apply_event(links, log.decode(row), position)
                continue
            convert, atype, topic_json = kind
            values, state_text = read
            aid = id_text(convert(oid))
            owner = owners.get(aid)
            if owner is None:
                org_id = self._owner(batch, aid, atype, None, values.get("org_id"))
                if org_id is None:
                    continue
                owner = owners[aid] = (org_id, _json_text(aid))
            org_id, aid_json = owner
            # `record_text`'s record, as canonical() writes it: keys sorted, no spaces
            record = (
                f'{{"originator_id":{aid_json},"originator_version":{int(version)},'
                f'"position":{position},"state":{state_text},"topic":{topic_json}}}'
            ).encode()
            links.add(org_id, position, record)
        links.put()

    @staticmethod
    def _owner(
        batch: ViewBatch, aid: str, atype: str, event: Any | None, org: Any | None
    ) -> str | None:
        """The organization of an event of aggregate `aid` (`org_of`; without the event,
        from its state's org_id `org`), indexing the aggregate at its first event."""
        ikey = f"agg:{aid}"
        index = batch.get(INDEX, ikey)
        if index is not None:
            return str(index["org_id"])
        if event is not None:
            org_id = org_of(event, None)
        else:
            org_id = str(org) if org else aid if atype == "organization" else None
        if org_id is not None:
            batch.put(INDEX, ikey, {"org_id": org_id, "type": atype})
        return org_id


class _Links:
    """Organizations' chains and current blocks over one event (`apply`) or a page of them
    (`apply_stored`): read from the batch once, extended here, put back by `put`."""

    def __init__(self, batch: ViewBatch) -> None:
        self.batch = batch
        self._chains: dict[str, dict[str, Any]] = {}
        # org -> (the block's number, its key, the block)
        self._blocks: dict[str, tuple[int, str, dict[str, Any]]] = {}

    def add(self, org_id: str, position: int, record: bytes) -> None:
        """The entry at `position` whose record's canonical text is `record`."""
        chain = self._chains.get(org_id)
        if chain is None:
            found = self.batch.get(org_id, "chain")
            chain = dict(found) if found else {"head": GENESIS, "count": 0, "position": 0}
            self._chains[org_id] = chain
        h = chain_hash(chain["head"], record)
        number = (position - 1) // BLOCK  # `block_key`'s
        held = self._blocks.get(org_id)
        if held is None or held[0] != number:
            if held is not None:
                self.batch.put(org_id, held[1], held[2])
            bkey = block_key(position)
            block = self.batch.get(org_id, bkey) or {"p": [], "h": []}
            held = self._blocks[org_id] = (number, bkey, block)
        held[2]["p"].append(position)
        held[2]["h"].append(h)
        chain["head"], chain["count"], chain["position"] = h, chain["count"] + 1, position

    def put(self) -> None:
        """Put every chain and block held in the batch, and hold none."""
        for org_id, (_number, bkey, block) in self._blocks.items():
            self.batch.put(org_id, bkey, block)
        for org_id, chain in self._chains.items():
            self.batch.put(org_id, "chain", chain)
        self._blocks.clear()
        self._chains.clear()


# What `apply_stored` needs of the event class of a (stored topic, originator id type): the
# originator id's convertor, its aggregate type and its topic's JSON text; None for a class
# whose events it must decode (upcast from an earlier class version, or an `org_id` that is
# not in its state).
_Kind = tuple[Callable[[Any], Any], str, str] | None


def _kind(stored_topic: str, id_type: type) -> _Kind:
    cls = resolve_topic(stored_topic)
    if getattr(cls, "class_version", 1) != 1 or hasattr(cls, "org_id"):
        return None
    return find_id_convertor(cls, id_type), _agg_type_of(cls), _json_text(_topic_of(cls))


# The JSON text of a str, as `canonical` writes it (within a document).
_json_text = json.JSONEncoder(ensure_ascii=False).encode


def entry(position: int, hash_: str, event: Any | None) -> Doc:
    """What the audit says of the event at `position`: {position, time, type, topic,
    aggregate_type, aggregate_id, version, actor, data, hash}, as JSON decodes it. An event
    the log no longer has (see `verify`) is its position and hash, every other field None."""
    if event is None:
        return dict.fromkeys(ENTRY_FIELDS) | {"position": position, "hash": hash_}
    cls = type(event)
    state = event_state(event)
    doc = {
        "position": position,
        "time": iso(event.timestamp),
        "type": cls.__name__,
        "topic": _topic_of(cls),
        "aggregate_type": _agg_type_of(cls),
        "aggregate_id": id_text(event.originator_id),
        "version": int(event.originator_version),
        "actor": getattr(event, "actor", None),
        "data": {k: v for k, v in state.items() if k not in _HIDDEN},
        "hash": hash_,
    }
    decoded: Doc = json.loads(dumps(doc))  # the values JSON has (Decimal, datetime: text)
    return decoded


# What `entry` gives (the API shows all but `topic`).
ENTRY_FIELDS = (
    "position",
    "time",
    "type",
    "topic",
    "aggregate_type",
    "aggregate_id",
    "version",
    "actor",
    "data",
    "hash",
)
# Blocks per read of `hashes_after`: from 2, doubling up to 64. An organization alone in its
# log fills a block (1,000 entries, ~70 kB), one among thousands may have one entry in each.
_BLOCKS_FIRST, _BLOCKS_MOST = 2, 64


def hashes_after(store: ViewStore, org_id: str, after: int = 0) -> Iterator[tuple[int, str]]:
    """(position, hash) of the organization's entries after position `after`, in log order."""
    first = after // BLOCK  # the block of position after + 1
    cursor = f"b:{first - 1:016d}" if first > 0 else None
    blocks = _BLOCKS_FIRST
    while True:
        page = store.list(AUDIT, org_id, "b:", after=cursor, limit=blocks)
        for key, doc in page:
            cursor = key
            for position, h in zip(doc["p"], doc["h"], strict=True):
                if position > after:
                    yield position, h
        if len(page) < blocks:
            return
        blocks = min(blocks * 2, _BLOCKS_MOST)


def entries(
    log: Application[Any],
    store: ViewStore,
    org_id: str,
    after: int = 0,
    limit: int = 100,
    aggregate_id: str | None = None,
    type_: str | None = None,
) -> list[Doc]:
    """The organization's first `limit` entries after position `after` (`entry`), of the
    aggregate `aggregate_id` and the event class named `type_` when given: the positions and
    hashes from the view, the rest read from the log, a page of positions at a time."""
    out: list[Doc] = []
    pairs = hashes_after(store, org_id, after)
    read = max(limit * 2, 200)
    while len(out) < limit:
        page = list(islice(pairs, read))
        if not page:
            break
        events = events_at(log, [position for position, _ in page])
        for position, h in page:
            event = events.get(position)
            if aggregate_id is not None or type_ is not None:
                if event is None:
                    continue
                if aggregate_id is not None and id_text(event.originator_id) != aggregate_id:
                    continue
                if type_ is not None and type(event).__name__ != type_:
                    continue
            out.append(entry(position, h, event))
            if len(out) == limit:
                break
    return out


def anchors_from(text: str) -> dict[str, Anchor]:
    """The heads of an earlier `verify` output (JSON with `heads`), as anchors."""
    try:
        heads = json.loads(text)["heads"]
        anchors = {
            str(org): (int(h["position"]), str(h["head"]))
            for org, h in heads.items()
            if h["position"] > 0
        }
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        msg = "the anchor file is not an earlier `tensorant audit verify` output"
        raise InvalidAnchor(msg) from e
    return anchors


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    events_checked: int
    first_bad_position: int | None
    organizations: int
    heads: dict[str, dict[str, Any]]  # org -> {position, head, count}, recomputed from the log

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "events_checked": self.events_checked,
            "first_bad_position": self.first_bad_position,
            "organizations": self.organizations,
            "heads": self.heads,
        }


def verify(
    log: Application[Any],
    store: ViewStore,
    org_id: str | None = None,
    page: int = 2000,
    anchors: Mapping[str, Anchor] | None = None,
) -> VerifyResult:
    """Recompute every organization's chain from the event store and compare with the view.

    Detects changed state bytes (hash differs), a deleted row (the view has a position the log
    lacks), an inserted or reordered row (hash differs at the first moved position). Only the
    log up to the view's position is checked; the view must have caught up. With `anchors`
    (heads reported earlier and kept elsewhere), an anchored position whose recomputed hash
    differs, or that the log no longer has, is bad even when the view was rebuilt to match.
    """
    anchors = dict(anchors or {})
    upto = store.position(AUDIT)
    heads: dict[str, str] = {}
    seen: dict[str, set[int]] = {}
    kept: dict[str, dict[int, str]] = {}  # org -> position -> the hash the view holds

    def kept_by(org: str) -> dict[int, str]:
        if org not in kept:
            kept[org] = dict(hashes_after(store, org))
        return kept[org]

    bad: list[int] = []
    checked = 0
    start = 0
    index_cache: dict[str, Doc | None] = {}
    while True:
        notes = log.recorder.select_notifications(
            start=start, limit=page, stop=upto, inclusive_of_start=False
        )
        for n in notes:
            start = n.id
            aid = str(n.originator_id)
            if aid not in index_cache:
                index_cache[aid] = store.get(AUDIT, INDEX, f"agg:{aid}")
            try:
                event = log.mapper.to_domain_event(n)
            except Exception:  # undecodable bytes are tampering too
                bad.append(n.id)
                continue
            org = org_of(event, index_cache[aid])
            if org is None or (org_id is not None and org != org_id):
                continue
            checked += 1
            seen.setdefault(org, set()).add(n.id)
            prev = heads.get(org, GENESIS)
            record = record_text(
                n.id, _topic(event), aid, int(n.originator_version), event_state(event)
            )
            h = chain_hash(prev, record)
            heads[org] = h
            anchored = anchors.get(org, (n.id, h))  # a kept head at this position must match
            if kept_by(org).get(n.id) != h or (anchored[0] == n.id and anchored[1] != h):
                bad.append(n.id)
        if len(notes) < page:
            break
    orgs = [org_id] if org_id is not None else sorted({o for o, _, _ in _chains(store)})
    for org in orgs:
        for position in kept_by(org):
            if position <= upto and position not in seen.get(org, set()):
                bad.append(position)  # the view knows an event the log lost
    for org, (position, _head) in anchors.items():
        if (org_id is None or org == org_id) and position not in seen.get(org, set()):
            bad.append(position)  # the anchored event is gone (or the view lost its place)
    first = min(bad) if bad else None
    summary = {
        org: {"position": max(seen[org]), "head": head, "count": len(seen[org])}
        for org, head in heads.items()
    }
    return VerifyResult(first is None, checked, first, len(orgs), summary)


def _chains(store: Any) -> Iterable[tuple[str, str, Doc]]:
    for org, key, doc in store.iter_all(AUDIT):
        if key == "chain" and org != INDEX:
            yield org, key, doc
