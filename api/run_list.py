"""The runs list (`GET /v1/runs`, the console's runs pages, cleanup status) without redoing, on
every request, the work whose result cannot have changed.

Every request reads the runs view (so a write is visible to the next read, C-RYW) and the
report store, as before. What is kept, per process, is keyed by what it is computed from:

- a run document's JSON text (as the store returns it) -> the decoded document;
- that text and the run's latest progress -> the run as the API shows it (`RunPublic`) and its
  JSON, only for a run whose presentation does not depend on the time: no open Pod segment
  (runtime and cost so far are fixed) and not watched for a stall.

- per organization, the list as last read (its texts) -> its decoded documents and run ids,
  and, when every run in it is presented the same whatever the time, its progress states ->
  the whole presented list: an unchanged list is then answered without a lookup per run
  (100 keyed lookups and the per-run presentation loop were half of the console's runs page
  under wrk, py-spy, bench/api_load.py).

A changed document is a different text, a new progress a different key: nothing kept can be
stale, and nothing is kept across organizations (the organization is part of every key). A run
with a live Pod is presented afresh on each request. The maps are bounded (least recently used
entries go first). Profiled under wrk (bench/api_load.py): decoding, presenting and validating
100 run documents was ~95% of `GET /v1/runs`' own work.

Documents and models handed out are shared between requests: read them, never change them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, cast

from pydantic import TypeAdapter

from api.schemas.runs import RunPublic
from application.report_reads import PROGRESS, ReportReads
from projections.store.base import Doc, KeyedTexts, ViewStore, string_at
from projections.store.lru import Lru
from projections.views.runs import RUNS, present_run

MAX_DOCS = 5_000
_RUN = TypeAdapter(RunPublic)


@dataclass
class _Entry:
    doc: Doc
    timeless: bool  # no open Pod segment: runtime and cost so far no longer change
    shown: dict[str, tuple[RunPublic, bytes]] = field(default_factory=dict)


_DOCS: Lru[tuple[str, str], _Entry] = Lru(MAX_DOCS)


def _decoded(org_id: str, texts: KeyedTexts) -> list[_Entry]:
    """The documents of `texts`, in order, decoded once per distinct text."""
    keys = [(org_id, text) for _, text in texts]
    entries = _DOCS.get_many(keys)
    for i, found in enumerate(entries):
        if found is None:
            doc = json.loads(keys[i][1])
            entry = _Entry(doc, timeless=all(seg["end"] for seg in doc["segments"]))
            entries[i] = entry
            _DOCS.put(keys[i], entry)
    return cast(list[_Entry], entries)


def run_docs(views: ViewStore, org_id: str) -> list[_Entry]:
    """The organization's run documents, in key order, decoded once per distinct text."""
    return _decoded(org_id, views.list_text(RUNS, org_id, "run:"))


def run_docs_where(
    views: ViewStore, org_id: str, path: Sequence[str], values: Sequence[str]
) -> list[_Entry]:
    """`run_docs` of the runs whose string at `path` is one of `values`. A remote store filters
    (PostgreSQL: the other runs' documents are not fetched); on a local one (embedded SQLite)
    the documents decoded here are filtered, which costs less than SQLite's JSON functions
    parsing every document's text (~1.5x the whole `run_docs`, measured at 100 runs)."""
    if views.local_reads:
        wanted = set(values)
        return [e for e in run_docs(views, org_id) if string_at(e.doc, path) in wanted]
    return _decoded(org_id, views.list_text_where(RUNS, org_id, "run:", path, values))


Shown = list[tuple[RunPublic, bytes]]


@dataclass
class _Listing:
    """An organization's runs list as last read, and what was made of it."""

    texts: KeyedTexts
    entries: list[_Entry]
    ids: list[str]
    # Every run timeless and not watched for a stall: shown the same at any time, so the
    # whole list depends on the documents and their progress alone.
    fixed: bool
    shown: tuple[dict[str, dict[str, Any]], Shown] | None = None  # (progress, presented)


# Lists kept: each holds its texts (~150 KB at 100 runs), so fewer than documents.
MAX_LISTS = 256
_LISTED: Lru[str, _Listing] = Lru(MAX_LISTS)


def _listing(views: ViewStore, org_id: str, last: _Listing | None) -> _Listing:
    """The organization's runs list, as `last` when its texts are the same (a store hands back
    the same text objects for an unchanged view: the comparison is one identity check each)."""
    texts = views.list_text(RUNS, org_id, "run:")
    if last is not None and texts == last.texts:
        return last
    entries = _decoded(org_id, texts)
    fixed = all(e.timeless and not ReportReads.watched(e.doc) for e in entries)
    return _Listing(texts, entries, [str(e.doc["id"]) for e in entries], fixed)


def presented_runs(views: ViewStore, org_id: str, now: datetime, reads: ReportReads) -> Shown:
    """Each run as `GET /v1/runs` shows it at `now`, with its JSON (what `RunPublic` dumps).
    The list is the caller's to change (sort); the runs and their JSON are shared.

    The progress of the runs the organization's list held last time is asked for before the
    list is read, so that both travel in one round trip (`ViewStore.one_connection`); when the
    list now holds other runs, their progress is read after it instead."""
    last = _LISTED.get(org_id)
    asked = reads.progress_later(last.ids) if last is not None and last.ids else None
    listing = _listing(views, org_id, last)
    entries = listing.entries
    if last is None or listing.ids != last.ids:
        asked = None
    if listing is not last:
        _LISTED.put(org_id, listing)
    progress = asked() if asked is not None else None
    if listing.fixed:
        if progress is None:
            progress = reads.reports.get_states(listing.ids, PROGRESS)
        kept = listing.shown
        if kept is not None and kept[0] == progress:
            return list(kept[1])
    statuses = reads.report_statuses([e.doc for e in entries], now, progress)
    out = []
    for entry, status in zip(entries, statuses, strict=True):
        fixed = entry.timeless and status["stalled_since"] is None
        state = status["progress"]
        key = "" if state is None else json.dumps(state, sort_keys=True)
        shown = entry.shown.get(key) if fixed else None
        if shown is None:
            run = RunPublic(**present_run(entry.doc, now), **status)
            shown = (run, _RUN.dump_json(run, by_alias=True))
            if fixed:
                if len(entry.shown) >= 4:  # a finished run's progress no longer changes
                    entry.shown.clear()
                entry.shown[key] = shown
        out.append(shown)
    if listing.fixed and progress is not None:
        listing.shown = (progress, out)
        return list(out)
    return out


def runs_json(shown: list[tuple[RunPublic, bytes]]) -> bytes:
    """The JSON array of the runs: what `TypeAdapter(list[RunPublic]).dump_json` gives."""
    return b"[" + b",".join(body for _, body in shown) + b"]"
