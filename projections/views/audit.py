"""The audit view (U1, U3): every event of an organization, in log order, in a hash chain.

Documents per organization: `e:<position, 20 digits>` -> {position, time, type, aggregate_type,
aggregate_id, version, actor, data, hash} and `chain` -> {head, count, position}. Index
documents (org `_`): `agg:<aggregate id>` -> {org_id, type}, because only an aggregate's
created event names its organization.

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
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from eventsourcing.application import Application

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

AUDIT = "audit"
INDEX = "_"
GENESIS = "0" * 64
_HIDDEN = ("originator_id", "originator_version", "timestamp", "actor")
Anchor = tuple[int, str]  # (position, head hash) of one organization's chain


class InvalidAnchor(DomainError):
    problem = "invalid-anchor"
    title = "The audit anchor is not valid"


def position_key(position: int) -> str:
    return f"e:{position:020d}"


def aggregate_type(topic: str) -> str:
    """`tensorant.Run.Event`-style topics name the aggregate: PodLaunched -> run."""
    return topic


def event_state(event: Any) -> dict[str, Any]:
    return {
        k: v for k, v in event.__dict__.items() if k not in ("originator_id", "originator_version")
    }


def record_hash(
    prev: str,
    position: int,
    topic: str,
    originator_id: str,
    version: int,
    state: dict[str, Any],
    encode: Callable[[Doc], str] = canonical,
) -> str:
    """`encode`: `canonical`, or the canonical encoder `encoders_for(state)` chose."""
    record = {
        "position": position,
        "topic": topic,
        "originator_id": originator_id,
        "originator_version": version,
        "state": state,
    }
    return hashlib.sha256(prev.encode() + encode(record).encode()).hexdigest()


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
    # what `share_views` splits by: apply + encode CPU s per 1M events (bench/projection_rebuild)
    rebuild_weight = 13.6

    def keys(self, event: Any) -> Iterable[DocKey]:
        return [(INDEX, f"agg:{event.originator_id}")]

    def apply(self, batch: ViewBatch, event: Any, position: int) -> None:
        aid = id_text(event.originator_id)
        ikey = f"agg:{aid}"
        index = batch.get(INDEX, ikey)
        org_id = org_of(event, index)
        if org_id is None:
            return  # an event no organization owns (none exist today)
        cls = type(event)
        atype = _agg_type_of(cls)
        if index is None:
            batch.put(INDEX, ikey, {"org_id": org_id, "type": atype})
        chain = batch.get(org_id, "chain") or {"head": GENESIS, "count": 0, "position": 0}
        state = event_state(event)
        topic = _topic_of(cls)
        version = int(event.originator_version)
        when = iso(event.timestamp)
        hashed = state
        if type(state.get("timestamp")) is datetime and event.timestamp.tzinfo is not None:
            # The text canonical() would write for it anyway (`iso`), computed once.
            hashed = {**state, "timestamp": when}
        # The record and the document hold the state's values plus str, int and None: one
        # check of the state picks the encoder for both (the actor is in the state unless an
        # event class makes it something else).
        doc_text, record_text = encoders_for(hashed)
        actor = getattr(event, "actor", None)
        if actor is not None and type(actor) is not str:
            doc_text = dumps
        h = record_hash(chain["head"], position, topic, aid, version, hashed, record_text)
        data = {k: v for k, v in state.items() if k not in _HIDDEN}
        doc = {
            "position": position,
            "time": when,
            "type": cls.__name__,
            "topic": topic,
            "aggregate_type": atype,
            "aggregate_id": aid,
            "version": version,
            "actor": actor,
            "data": data,
            "hash": h,
        }
        batch.put_new(org_id, position_key(position), doc, doc_text(doc))
        batch.put(org_id, "chain", {"head": h, "count": chain["count"] + 1, "position": position})


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
            h = record_hash(
                prev, n.id, _topic(event), aid, int(n.originator_version), event_state(event)
            )
            heads[org] = h
            doc = store.get(AUDIT, org, position_key(n.id))
            anchored = anchors.get(org, (n.id, h))  # a kept head at this position must match
            if doc is None or doc["hash"] != h or (anchored[0] == n.id and anchored[1] != h):
                bad.append(n.id)
        if len(notes) < page:
            break
    orgs = [org_id] if org_id is not None else sorted({o for o, _, _ in _chains(store)})
    for org in orgs:
        for _key, doc in store.list(AUDIT, org, "e:"):
            if doc["position"] <= upto and doc["position"] not in seen.get(org, set()):
                bad.append(int(doc["position"]))  # the view knows an event the log lost
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
