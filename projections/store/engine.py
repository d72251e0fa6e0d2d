"""The projection engine: batched, exactly-once application of the notification log to views.

Each batch reads up to `batch_size` notifications after the view's position, decodes them with
the application's mapper, applies them to the batch's in-memory working set, and writes the
changed documents and the new position in one transaction (see `projections.store.base`).

One instance per view: every batch holds the view's lock (PostgreSQL
`pg_advisory_xact_lock(view)`, SQLite `BEGIN IMMEDIATE`) and reads the position inside its
transaction, and the flush re-checks that position. A second instance therefore WAITS: its
batch blocks until the first one commits, then it sees the new position and applies only what
is left. It never double-applies. `catch_up_to` uses the fail-fast variant (`wait=False`) and
falls back to polling the position when another instance is busy.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from typing import Any, Protocol

from eventsourcing.application import Application
from eventsourcing.domain import DomainEventProtocol

from projections.store.base import Doc, DocKey, ViewBatch, ViewBusyError, ViewStore
from projections.store.bulk import RebuildBatch
from projections.store.logscan import Page, Read, Scan, StoredLog, log_scan, stored_log
from projections.store.wakeup import poll_timeout, waker_for

log = logging.getLogger(__name__)

# Most documents kept between the batches of one run (beyond that, batches read them again).
_CACHE_LIMIT = 200_000
# Notifications per batch while rebuilding (unless the projector's batch_size is bigger): fewer,
# larger transactions write each often-changed document once per batch instead of many times.
REBUILD_BATCH_SIZE = 20_000
_event_of = itemgetter(1)
# Where a view whose projection has a `layout` records it: (org, key) of {"layout": n}. Written
# by a view's first batch and by a rebuild; `Projector.upgrade` rebuilds a view holding another.
LAYOUT = ("_", "layout")


def layout_doc(projection: Any) -> Doc | None:
    """The `LAYOUT` document a view of `projection` holds, or None if it declares none."""
    layout = getattr(projection, "layout", None)
    return None if layout is None else {"layout": int(layout)}


# Tracked allocations between young-generation collections during bulk work (CPython's default
# is 700). A rebuild keeps two batches of decoded events alive; at the default, the collector
# keeps re-scanning them and costs more than the decoding itself (at 100,000 a rebuild process
# still spent ~1 s of 17 in it; at 1,000,000 about as little as with the collector off).
_REBUILD_GC_THRESHOLD = 1_000_000
_gc_lock = threading.Lock()
_gc_depth = 0
_gc_saved: tuple[int, ...] = ()


@contextlib.contextmanager
def bulk_gc() -> Iterator[None]:
    """Collect cyclic garbage less often for the duration (process-wide; nests; restored).

    For bulk work that keeps many objects alive (a rebuild, a big export): at CPython's
    default thresholds the collector re-scans them again and again.
    """
    global _gc_depth, _gc_saved  # noqa: PLW0603 - one process-wide setting, shared by threads
    with _gc_lock:
        if _gc_depth == 0:
            _gc_saved = gc.get_threshold()
            gc.set_threshold(max(_gc_saved[0], _REBUILD_GC_THRESHOLD), *_gc_saved[1:])
        _gc_depth += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_depth -= 1
            if _gc_depth == 0:
                gc.set_threshold(*_gc_saved)


def topics_of(*event_classes: type) -> list[str]:
    """The stored topics of these event classes, for a projection's `topics`."""
    return [c.TOPIC for c in event_classes]  # type: ignore[attr-defined]


class Projection(Protocol):
    """A view's event handler.

    Optional members, found with getattr: `topics: Sequence[str]` (read only these event
    topics), `keys(event) -> Iterable[DocKey]` (documents `apply` will get, so a batch can
    load them all with one query), `layout: int` (the version of its documents' layout:
    a view built by another one is rebuilt when its projector starts, see `LAYOUT`) and
    `apply_stored(batch, rows, log)` (what `apply` does for each event in order, from their
    `StoredRow`s and the log's `StoredLog`: a rebuild calls it with each page's rows instead
    of `apply` where the log allows).
    """

    name: str

    def apply(self, batch: ViewBatch, event: DomainEventProtocol[Any], position: int) -> None:
        """Apply one event (position = its notification id) to the batch's documents."""
        ...


@dataclass(frozen=True)
class _Slice:
    """Decoded notifications after `start`, up to and including position `end`."""

    start: int
    end: int
    events: list[tuple[int, DomainEventProtocol[Any]]]
    drained: bool


class Projector:
    """Runs one projection into one view of `store`, reading `app`'s notification log."""

    def __init__(
        self,
        app: Application[Any],
        store: ViewStore,
        projection: Projection,
        *,
        batch_size: int = 1000,
        view: str | None = None,
        rebuild_batch_size: int | None = None,
    ) -> None:
        """`view` defaults to the projection's name; give another to rebuild into a shadow view.

        `rebuild` reads `rebuild_batch_size` notifications per batch (default: the larger of
        `batch_size` and REBUILD_BATCH_SIZE).
        """
        self.app = app
        self.store = store
        self.projection = projection
        self.batch_size = batch_size
        self.rebuild_batch_size = rebuild_batch_size or max(batch_size, REBUILD_BATCH_SIZE)
        self.view = view or projection.name
        self._topics: list[str] = list(getattr(projection, "topics", ()) or ())
        self._keys: Any = getattr(projection, "keys", None)
        self._layout = layout_doc(projection)

    def position(self) -> int:
        """The view's tracking position."""
        return self.store.position(self.view)

    def _read(self, start: int, stop: int | None, limit: int | None = None) -> _Slice:
        """Read and decode the next notifications after `start` (no view transaction needed)."""
        limit = limit or self.batch_size
        recorder = self.app.recorder
        upper = stop
        if self._topics:
            # Filtered reads can skip non-matching events only up to a known head.
            head = recorder.max_notification_id() or 0
            upper = head if stop is None else min(stop, head)
        notifications = recorder.select_notifications(
            start=start,
            limit=limit,
            stop=upper,
            topics=self._topics,
            inclusive_of_start=False,
        )
        drained = len(notifications) < limit
        decode = self.app.mapper.to_domain_event
        events = [(n.id, decode(n)) for n in notifications]
        end = events[-1][0] if events else start
        if drained and upper is not None and self._topics:
            end = max(end, upper)
        return _Slice(start, end, events, drained)

    def _apply(self, b: ViewBatch, part: _Slice) -> None:
        if self._layout is not None and b.position == 0 and b.get(*LAYOUT) != self._layout:
            b.put(*LAYOUT, self._layout)  # a new view: what its documents look like
        if self._keys is not None and part.events:
            # Each distinct key once (iterated in C); prefetch loads those not already held.
            keys: set[DocKey] = set(
                chain.from_iterable(map(self._keys, map(_event_of, part.events)))
            )
            b.prefetch(keys)
        apply = self.projection.apply
        for position, event in part.events:
            apply(b, event, position)
        if part.end > b.position:
            b.set_position(part.end)

    def run_batch(self, *, wait: bool = True, stop: int | None = None) -> tuple[int, bool]:
        """Apply one batch; returns (events applied, whether the log is drained up to `stop`)."""
        with self.store.batch(self.view, wait=wait) as b:
            if stop is not None and b.position >= stop:
                return 0, True
            part = self._read(b.position, stop)
            self._apply(b, part)
            return len(part.events), part.drained

    def run_once(self) -> int:
        """Apply everything recorded so far, batch by batch; returns the number of events."""
        return self._run(self.batch_size)

    def _run(self, limit: int) -> int:
        """Apply everything recorded so far in batches of `limit` notifications.

        While one batch is applied and written, a helper thread reads and decodes the next
        one (psycopg and sqlite3 release the GIL while waiting on the database). The batch
        still takes its start from the position read inside its own transaction: a read-ahead
        that does not start there is discarded.
        """
        total = 0
        # Documents as committed by our previous batch: valid while the view's position is
        # still the one we committed (every write to a view goes through a batch that holds
        # its lock and moves its position; a reset moves it back to 0).
        cache: dict[DocKey, Doc | None] = {}
        cached_at = -1
        with ThreadPoolExecutor(1, thread_name_prefix=f"read-ahead:{self.view}") as pool:
            ahead: Future[_Slice] | None = None
            while True:
                with self.store.batch(self.view) as b:
                    if b.position == cached_at:
                        b.seed(cache)
                    part = ahead.result() if ahead is not None else None
                    if part is None or part.start != b.position:
                        part = self._read(b.position, None, limit)
                    ahead = None if part.drained else pool.submit(self._read, part.end, None, limit)
                    self._apply(b, part)
                total += len(part.events)
                if part.drained:
                    return total
                cache = b.working_set() if len(b.working_set()) <= _CACHE_LIMIT else {}
                cached_at = b.position

    def catch_up_to(self, position: int, timeout: float = 5.0) -> bool:
        """Wait until the view has applied `position` (read-your-writes); False on timeout.

        Runs the projection itself when the view's lock is free, otherwise polls the position.
        """
        deadline = time.monotonic() + timeout
        delay = 0.002
        while True:
            current = self.position()
            if current >= position:
                return True
            with contextlib.suppress(ViewBusyError):
                self.run_batch(wait=False, stop=position)
            if self.position() > current:
                continue
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.05)

    def rebuild(self) -> int:
        """Build the view anew from the whole log; returns the number of events applied.

        In memory, written in one transaction (`rebuild_views`): readers see the old view
        until it commits. To compare first, rebuild into a shadow view
        (`Projector(..., view="name__rebuild")`) and compare `store.digest`.
        """
        stats = rebuild_views(
            self.app, self.store, [(self.view, self.projection)], page=self.rebuild_batch_size
        )
        return stats.events[self.view]

    def upgrade(self) -> bool:
        """Rebuild the view if an earlier layout of its projection's documents built it (its
        `LAYOUT` document differs); True if it did. Readers see the old view until the
        rebuild commits."""
        if self._layout is None or self.position() == 0:
            return False
        if self.store.get(self.view, *LAYOUT) == self._layout:
            return False
        log.warning("view %r has an earlier layout: rebuilding it from the log", self.view)
        self.rebuild()
        return True

    def run_forever(self, stop: threading.Event, poll_interval: float = 1.0) -> None:
        """Apply new events until `stop` is set; wakes on NOTIFY (PostgreSQL) or polls.

        First, a view of an earlier layout is rebuilt (`upgrade`). A failing batch is rolled
        back, logged, and retried with backoff, so one bad event stops this view (visibly, in
        the logs and its position) without killing the process.
        """
        waker = waker_for(self.app)  # LISTEN before the first read, so no commit is missed
        failures = 0
        upgraded = False
        try:
            while not stop.is_set():
                try:
                    if not upgraded:
                        self.upgrade()
                        upgraded = True
                    self.run_once()
                    failures = 0
                except Exception:
                    failures += 1
                    log.exception("projection %r failed (attempt %d)", self.view, failures)
                    stop.wait(min(poll_interval * 2**failures, 30.0))
                    continue
                waker.wait(stop, poll_timeout(waker, poll_interval))
        finally:
            waker.close()


@dataclass
class RebuildStats:
    """What `rebuild_views` did and where its time went (seconds of wall time)."""

    events: dict[str, int]  # events applied per view
    documents: dict[str, int]  # documents per view afterwards
    position: int  # the notification id every view was rebuilt up to
    read: int = 0  # notifications read (each once, whatever the number of views)
    total_s: float = 0.0
    read_wait_s: float = 0.0  # waiting for the read-ahead (select + decode) of the next page
    # CPU seconds of the applying thread, per view (wall time depends on the machine's load):
    apply_s: dict[str, float] = field(default_factory=dict)  # applying events
    encode_s: dict[str, float] = field(default_factory=dict)  # encoding changed documents
    write_s: float = 0.0  # writing the documents (COPY etc.) and committing
    # Per process that rebuilt some of the views: (its views, wall s, CPU s of the whole
    # process: reading, decoding, applying, writing), to see how evenly `share_views` split.
    processes: list[tuple[tuple[str, ...], float, float]] = field(default_factory=list)


def rebuild_views(
    app: Application[Any],
    store: ViewStore,
    projections: Sequence[tuple[str, Projection]],
    *,
    page: int = REBUILD_BATCH_SIZE,
) -> RebuildStats:
    """Build `projections` (view name, projection) anew from ONE read of the log.

    The live path (`Projector.run_once`) reads the log per view and loads and flushes each
    view's documents per batch. A rebuild starts from empty views, so each view is applied in
    memory (`RebuildBatch`) while a helper thread reads and decodes the next page of
    notifications. Once the log is read, each view's documents go to one `BulkWriter`
    transaction (COPY on PostgreSQL) in key order: page by page, as before, each
    page's new keys landed all over the primary key, and PostgreSQL spent ~50% more CPU on the
    same documents. The writer holds the views' locks from the start: live batches of these
    views wait, then resume from the rebuilt position; readers see the old views until the
    commit. Any error rolls everything back.

    A view with `topics` sees only those events, as its live reads do; every view's position
    becomes the last notification id read, as a live batch that drained the log records it.
    A view whose projection has `apply_stored` gets the stored rows (`StoredLog`) when the log
    allows; the page decodes only the topics the other views read.
    """
    views = [view for view, _ in projections]
    if len(set(views)) != len(views):
        msg = f"a view appears twice: {views}"
        raise ValueError(msg)
    batches = {view: RebuildBatch(view) for view in views}
    for view, p in projections:
        layout = layout_doc(p)
        if layout is not None:
            batches[view].put(*LAYOUT, layout)
    topics = {view: frozenset(getattr(p, "topics", ()) or ()) for view, p in projections}
    stats = RebuildStats(
        events=dict.fromkeys(views, 0),
        documents={},
        position=0,
        apply_s=dict.fromkeys(views, 0.0),
        encode_s=dict.fromkeys(views, 0.0),
    )
    scan, stored = _rebuild_scan(app, projections, topics)

    def read(start: int) -> Page:
        return scan(start, page)

    started, cpu = time.perf_counter(), time.process_time()
    writer = store.replace_views(views)
    try:
        with bulk_gc(), ThreadPoolExecutor(1, thread_name_prefix="rebuild-read") as reader:
            ahead = reader.submit(read, 0)
            while True:
                t = time.perf_counter()
                events, end, count = ahead.result()
                stats.read_wait_s += time.perf_counter() - t
                stats.read += count
                drained = count < page
                if not drained:
                    ahead = reader.submit(read, end)
                _apply_page(projections, batches, topics, events, stats, stored)
                stats.position = end
                if drained:
                    break
            t = time.perf_counter()
            for view, b in batches.items():
                writer.write(view, b.documents())
            writer.commit(dict.fromkeys(views, stats.position))
            stats.write_s = time.perf_counter() - t
    except BaseException:
        writer.rollback()
        raise
    stats.documents = {view: b.document_count() for view, b in batches.items()}
    stats.total_s = time.perf_counter() - started
    stats.processes = [(tuple(views), stats.total_s, time.process_time() - cpu)]
    return stats


def _rebuild_scan(
    app: Application[Any],
    projections: Sequence[tuple[str, Projection]],
    topics: dict[str, frozenset[str]],
) -> tuple[Scan, StoredLog | None]:
    """The scan of a rebuild of `projections`, and the `StoredLog` of its rows when a view
    reads them: it decodes the topics of the views that read events (all, if one reads all)."""
    stored = stored_log(app) if any(hasattr(p, "apply_stored") for _, p in projections) else None
    from_rows = {view for view, p in projections if stored and hasattr(p, "apply_stored")}
    decoded = [t for view, t in topics.items() if view not in from_rows]
    wanted = None if any(not t for t in decoded) else frozenset().union(*decoded)
    return log_scan(app, wanted, keep_rows=bool(from_rows)), stored


# What a process opens to rebuild its share of the views (`rebuild_views_in_processes`): the
# log and the view store. A module-level function, or a `functools.partial` of one: the spawn
# start method sends it to the child by name.
Opener = Callable[[], tuple[Application[Any], ViewStore]]
# A view's rebuild cost relative to the others when its projection does not say
# (`rebuild_weight`: decode + apply + encode CPU seconds per 1M events; the light views are
# under 3).
DEFAULT_REBUILD_WEIGHT = 0.5


def share_views(
    projections: Sequence[tuple[str, Projection]], processes: int
) -> list[list[tuple[str, Projection]]]:
    """`projections` in at most `processes` groups of about equal rebuild cost, heaviest view
    first into the lightest group; no group is empty."""

    def weight(item: tuple[str, Projection]) -> float:
        return float(getattr(item[1], "rebuild_weight", DEFAULT_REBUILD_WEIGHT))

    groups: list[list[tuple[str, Projection]]] = [
        [] for _ in range(max(1, min(processes, len(projections))))
    ]
    loads = [0.0] * len(groups)
    for item in sorted(projections, key=weight, reverse=True):
        lightest = loads.index(min(loads))
        groups[lightest].append(item)
        loads[lightest] += weight(item)
    return [g for g in groups if g]


def rebuild_views_in_processes(
    opener: Opener,
    projections: Sequence[tuple[str, Projection]],
    processes: int,
    *,
    page: int = REBUILD_BATCH_SIZE,
) -> RebuildStats:
    """`rebuild_views` of `projections` shared among `processes` processes (`share_views`):
    this one and `processes - 1` spawned ones, each opening the log and the store (`opener`)
    and reading and decoding the log itself. Applying events is Python, one core per process
    whatever its threads, so on a machine of N cores N processes rebuild in about 1/N of the
    time, less what PostgreSQL's own writes take. Each group commits on its own: every view
    is rebuilt whole or not at all, but an error in one group leaves the other groups' views
    rebuilt (run again to finish; a view rebuilt twice is the same view)."""
    groups = share_views(projections, processes)
    started = time.perf_counter()
    if len(groups) == 1:
        parts = [_rebuild_group(opener, groups[0], page)]
    else:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(len(groups) - 1, mp_context=context) as pool:
            others = [pool.submit(_rebuild_group, opener, g, page) for g in groups[1:]]
            parts = [_rebuild_group(opener, groups[0], page)]
            parts += [f.result() for f in others]
    merged = RebuildStats(
        events={},
        documents={},
        position=min(part.position for part in parts),
        read=sum(part.read for part in parts),
    )
    for part in parts:
        for name in ("events", "documents", "apply_s", "encode_s"):
            getattr(merged, name).update(getattr(part, name))
        merged.read_wait_s = max(merged.read_wait_s, part.read_wait_s)
        merged.write_s = max(merged.write_s, part.write_s)
        merged.processes += part.processes
    merged.total_s = time.perf_counter() - started
    return merged


def _rebuild_group(
    opener: Opener, group: Sequence[tuple[str, Projection]], page: int
) -> RebuildStats:
    app, store = opener()
    try:
        return rebuild_views(app, store, group, page=page)
    finally:
        store.close()
        app.close()


def _apply_page(
    projections: Sequence[tuple[str, Projection]],
    batches: dict[str, RebuildBatch],
    topics: dict[str, frozenset[str]],
    events: list[Read],
    stats: RebuildStats,
    stored: StoredLog | None,
) -> None:
    """Apply one page of (position, topic, event, row) to every view, view after view (they
    are independent): its stored rows to a projection with `apply_stored` when the page has
    them; each view's changed documents encoded (`RebuildBatch.settle`)."""
    for view, p in projections:
        t = time.thread_time()
        b, only = batches[view], topics[view]
        mine = events if not only else [e for e in events if e[1] in only]
        apply_stored = getattr(p, "apply_stored", None) if stored is not None else None
        if apply_stored is not None:
            apply_stored(b, [row for _position, _topic, _event, row in mine], stored)
        else:
            apply = p.apply
            for position, _topic, event, _row in mine:
                apply(b, event, position)
        t2 = time.thread_time()
        b.settle()
        stats.apply_s[view] += t2 - t
        stats.encode_s[view] += time.thread_time() - t2
        stats.events[view] += len(mine)


class ProjectionSet:
    """Several projectors in one process: one thread each, started and stopped together."""

    def __init__(self, projectors: Sequence[Projector]) -> None:
        self.projectors = {p.view: p for p in projectors}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def __getitem__(self, view: str) -> Projector:
        return self.projectors[view]

    def run_once(self) -> dict[str, int]:
        """Catch every view up, sequentially; returns events applied per view."""
        return {view: p.run_once() for view, p in self.projectors.items()}

    def rebuild(self) -> dict[str, int]:
        """Build every view anew with one read of the log per event store and view store
        (`rebuild_views`); returns events applied per view."""
        groups: dict[tuple[int, int], list[Projector]] = {}
        for p in self.projectors.values():
            groups.setdefault((id(p.app), id(p.store)), []).append(p)
        applied: dict[str, int] = {}
        for group in groups.values():
            first = group[0]
            stats = rebuild_views(
                first.app,
                first.store,
                [(p.view, p.projection) for p in group],
                page=max(p.rebuild_batch_size for p in group),
            )
            applied.update(stats.events)
        return applied

    def catch_up_to(self, position: int, timeout: float = 5.0) -> bool:
        """Wait until every view has applied `position`."""
        deadline = time.monotonic() + timeout
        return all(
            p.catch_up_to(position, max(deadline - time.monotonic(), 0.0))
            for p in self.projectors.values()
        )

    def start(self, poll_interval: float = 1.0) -> None:
        """Start one `run_forever` thread per view."""
        if self._threads:
            return
        self._stop.clear()
        for view, p in self.projectors.items():
            t = threading.Thread(
                target=p.run_forever,
                args=(self._stop, poll_interval),
                name=f"projector:{view}",
                daemon=True,
            )
            t.start()
            self._threads.append(t)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the threads and wait for them."""
        self._stop.set()
        for t in self._threads:
            t.join(timeout)
        self._threads.clear()

    def __enter__(self) -> ProjectionSet:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
