"""The one ordered log: a single eventsourcing Application holds every aggregate.

Several commands save two aggregates at once (a project and the storage it locks, a run and the
connection its launch proves) and every view follows one notification order, so there is one
log, not one per area. The service classes (`application.services`) load from it and save to it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import (
    ApplicationRecorder,
    IntegrityError,
    InternalError,
    ProgrammingError,
    Recording,
    StoredEvent,
)

from application.ports import WhileAt
from domain.connection import Connection
from domain.errors import NotFound
from domain.organization import Organization
from domain.orphans import OrphanPods
from domain.project import Project
from domain.run import DISCARDED, Run
from domain.storage import Storage

A = TypeVar("A", bound=Aggregate)

# The latest version of each aggregate that exists, in one read of the log (`peek`).
LatestVersions = Callable[[Sequence[UUID]], dict[UUID, int]]
# An aggregate's stored events, oldest first, in one read of the log (`load`).
EventsOf = Callable[[UUID], list[StoredEvent]]


@dataclass(frozen=True)
class LogReads:
    """Reads of the log's own recorder in fewer steps than the library's
    (`adapters.event_versions`); where one is None, the library's reads serve."""

    latest_versions: LatestVersions | None = None
    events_of: EventsOf | None = None
    # The recorder's events table (schema, name) where a store in the same database can read
    # it in its own statements (`WhileAt`): PostgreSQL.
    events_table: tuple[str, str] | None = None


# Read-only aggregates kept per process (`peek`): an organization's few, well within this.
PEEK_CACHE_SIZE = 4096
# Aggregates a service keeps between its commands (`Kept`): runs training at once, per process.
KEPT_SIZE = 1024

# PostgreSQL's answers to two sessions creating the same catalog object at once: the loser of
# an IF NOT EXISTS race sees a duplicate table/object (42P07, 42710), a unique violation on a
# catalog index (23505) or "tuple concurrently updated" (XX000).
_DDL_RACE_SQLSTATES = frozenset({"42P07", "42710", "23505", "XX000"})


def replay(aggregate: Any, events: Iterable[Aggregate.Event]) -> Any:
    """eventsourcing's `project_aggregate` without its `isinstance(event, CanMutateProtocol)`
    assert: a runtime-checkable Protocol check walks the MRO on every event (Python 3.11), the
    largest single cost of loading an aggregate. Every event the log decodes is a registered
    `Aggregate.Event`, which has `mutate`."""
    for event in events:
        aggregate = event.mutate(aggregate)
    return aggregate


def _lost_a_ddl_race(error: BaseException) -> bool:
    """Whether a recorder's construction failed only because another process created the same
    tables at that moment (eventsourcing wraps psycopg's error, which keeps the SQLSTATE)."""
    if isinstance(error, (InternalError, IntegrityError)):
        return True
    return getattr(error.__cause__, "sqlstate", None) in _DDL_RACE_SQLSTATES


class TensorantLog(Application[UUID]):
    """Load and save aggregates; another organization's aggregate is simply not found (A4)."""

    # The name fixes the PostgreSQL table (`tensorant_events`): never change it.
    name = "tensorant"

    def __init__(
        self,
        env: Any = None,
        *,
        reads: Callable[[ApplicationRecorder], LogReads | None] | None = None,
    ) -> None:
        """`reads`: given the recorder, its `LogReads` (`adapters.event_versions.log_reads`);
        without them, `peek` asks per aggregate and `load` reads through the repository."""
        super().__init__(env)
        found = (reads(self.recorder) if reads else None) or LogReads()
        self._latest: LatestVersions = found.latest_versions or self._latest_one_by_one
        self._events_of = found.events_of
        self._events_table = found.events_table
        self._peeked: OrderedDict[UUID, Aggregate] = OrderedDict()
        self._peek_lock = threading.Lock()

    def construct_recorder(self) -> ApplicationRecorder:
        """The recorder, creating its tables if asked. Processes that start together (two
        workers) each run that DDL (IF NOT EXISTS), and PostgreSQL can refuse one of two
        concurrent catalog changes ("tuple concurrently updated", a duplicate catalog key, or
        "relation already exists" from a CREATE ... IF NOT EXISTS that lost the race): a worker
        died at start in a CI run so. The DDL is idempotent, so it is tried again."""
        attempts = 8
        for attempt in range(1, attempts + 1):
            try:
                return super().construct_recorder()
            except (InternalError, IntegrityError, ProgrammingError) as e:
                if attempt == attempts or not _lost_a_ddl_race(e):
                    raise
                time.sleep(0.05 * attempt)
        raise AssertionError("unreachable")

    def save_all(self, *aggregates: Aggregate | None) -> int:
        """Save atomically and return the last notification id (for read-your-writes waits).

        What the library's `save` does when it keeps no snapshots and no cache (this log's
        setting): the aggregates' pending events put in the event store, in order. `save` also
        asks of each aggregate whether it is an event and whether it collects events, two
        runtime Protocol checks that walk the class on Python 3.11 (13 µs a save)."""
        if self.snapshots is not None or self.repository.cache is not None:
            recordings: list[Recording[UUID]] = self.save(*aggregates)
        else:
            events = [e for a in aggregates if a is not None for e in a.collect_events()]
            recordings = self.events.put(events)
        return max((r.notification.id for r in recordings), default=0)

    def load(self, cls: type[A], aggregate_id: UUID | str, org_id: str | None = None) -> A:
        """The aggregate of that class; a malformed id, another class or another
        organization's aggregate is 'not found', never 'forbidden' (A4)."""
        try:
            uid = aggregate_id if isinstance(aggregate_id, UUID) else UUID(str(aggregate_id))
            found: Aggregate = self._get(uid)
        except (ValueError, AggregateNotFoundError):
            raise NotFound(f"{cls.__name__.lower()} {aggregate_id} not found") from None
        if not isinstance(found, cls) or (
            org_id is not None and getattr(found, "org_id", None) != org_id
        ):
            raise NotFound(f"{cls.__name__.lower()} {aggregate_id} not found")
        return found

    def _get(self, uid: UUID) -> Aggregate:
        """The repository's `get` (no snapshots, no cache here), in one read where the
        recorder has one (a SQLite read without the library's BEGIN and ROLLBACK around it)."""
        if self._events_of is None:
            found: Aggregate = self.repository.get(uid, projector_func=replay)
            return found
        stored = self._events_of(uid)
        if not stored:
            raise AggregateNotFoundError(uid)
        events = cast("list[Aggregate.Event]", [self.mapper.to_domain_event(e) for e in stored])
        aggregate: Aggregate = replay(None, events)
        return aggregate

    def peek(
        self, *wanted: tuple[type[Aggregate], UUID | str, str | None]
    ) -> list[Aggregate | None]:
        """Aggregates to read, not to change: each `(class, id, org id)` as `load` finds it,
        or None where `load` raises NotFound. One read of the log asks for their versions;
        an aggregate this process holds at that version is not read again (a draft's checks
        read three aggregates that rarely change). What this returns is shared between
        threads: a caller must never run a command on it (load it for that)."""
        uids: list[UUID | None] = []
        for _cls, aggregate_id, _org in wanted:
            try:
                uids.append(aggregate_id if isinstance(aggregate_id, UUID) else UUID(aggregate_id))
            except ValueError:
                uids.append(None)
        versions = self._latest([u for u in uids if u is not None])
        found: list[Aggregate | None] = []
        for (cls, _id, org_id), uid in zip(wanted, uids, strict=True):
            version = versions.get(uid) if uid is not None else None
            aggregate = self._peeked_at(uid, version) if uid is not None else None
            if uid is not None and version is not None and aggregate is None:
                try:
                    aggregate = self._get(uid)
                except AggregateNotFoundError:
                    aggregate = None
                if aggregate is not None:
                    self._keep_peeked(uid, aggregate)
            if not isinstance(aggregate, cls) or (
                org_id is not None and getattr(aggregate, "org_id", None) != org_id
            ):
                aggregate = None
            found.append(aggregate)
        return found

    def versions(self, uids: Sequence[UUID]) -> dict[UUID, int]:
        """The latest version of each aggregate that exists, in one read of the log."""
        return self._latest(uids)

    def while_at(self, aggregate: Aggregate) -> WhileAt:
        """The condition that the log still holds `aggregate` at its version (a claim's)."""
        uid = aggregate.id
        return WhileAt(
            uid, aggregate.version, lambda: self._latest([uid]).get(uid), self._events_table
        )

    def _peeked_at(self, uid: UUID, version: int | None) -> Aggregate | None:
        with self._peek_lock:
            kept = self._peeked.get(uid)
            if kept is None or kept.version != version:
                return None
            self._peeked.move_to_end(uid)
            return kept

    def _keep_peeked(self, uid: UUID, aggregate: Aggregate) -> None:
        with self._peek_lock:
            kept = self._peeked.get(uid)
            if kept is None or kept.version <= aggregate.version:
                self._peeked[uid] = aggregate
                self._peeked.move_to_end(uid)
            while len(self._peeked) > PEEK_CACHE_SIZE:
                self._peeked.popitem(last=False)

    def _latest_one_by_one(self, uids: Sequence[UUID]) -> dict[UUID, int]:
        latest: dict[UUID, int] = {}
        for uid in uids:
            last = self.recorder.select_events(uid, desc=True, limit=1)
            if last:
                latest[uid] = last[0].originator_version
        return latest

    def organization(self, org_id: str) -> Organization:
        return self.load(Organization, org_id)

    def connection(self, org_id: str) -> Connection:
        return self.load(Connection, Connection.id_for(org_id), org_id)

    def storage(self, org_id: str) -> Storage:
        return self.load(Storage, Storage.id_for(org_id), org_id)

    def project(self, org_id: str, project_id: str) -> Project:
        return self.load(Project, project_id, org_id)

    def run(self, org_id: str, run_id: str) -> Run:
        """A run of the organization; a discarded draft is gone (R3)."""
        run = self.load(Run, run_id, org_id)
        if run.state == DISCARDED:
            raise NotFound(f"run {run_id} not found")
        return run

    def orphan_pods(self, org_id: str) -> OrphanPods | None:
        """The organization's orphan Pods, None until the reconciler first found one (K1)."""
        try:
            return self.load(OrphanPods, OrphanPods.id_for(org_id), org_id)
        except NotFound:
            return None


class Kept(Generic[A]):
    """Aggregates of one class that a service keeps between its own commands, so the next
    command on one reads its version, not its events (a trainer reports every few steps;
    loading its run was a third of a report's time on SQLite, bench/command_throughput.py).

    `take` hands an aggregate to one caller: the kept one (taken out, so no other thread can
    have it) when the log holds no newer version of it, else `log.load`'s. `give_back` keeps
    it for the next `take`: call it only when the aggregate is exactly what the log holds at
    its version, that is after its save succeeded or when it has no changes. An aggregate whose
    save failed has no pending events but is not the log's: never give it back. Another
    process's save changes the version, so a kept aggregate never hides it."""

    def __init__(self, log: TensorantLog, cls: type[A], size: int = KEPT_SIZE) -> None:
        self._log, self._cls, self._size = log, cls, size
        self._kept: OrderedDict[UUID, A] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, aggregate_id: str, *, check: bool = True) -> A:
        """As `log.load(cls, aggregate_id)`; the caller owns what it gets. `check=False`: the
        kept one without reading its version, so possibly older than the log's; only for a
        caller whose next write proves the version (`log.while_at`, or a save, which fails on
        an older version) before anything is decided on it."""
        try:
            uid = UUID(aggregate_id)
        except ValueError:
            return self._log.load(self._cls, aggregate_id)  # NotFound, as `load` says it
        with self._lock:
            kept = self._kept.pop(uid, None)
        if kept is not None and (not check or self._log.versions([uid]).get(uid) == kept.version):
            return kept
        return self._log.load(self._cls, uid)

    def give_back(self, aggregate: A) -> None:
        if aggregate.pending_events:
            return  # changed and not saved: not what the log holds
        with self._lock:
            kept = self._kept.get(aggregate.id)
            if kept is None or kept.version <= aggregate.version:
                self._kept[aggregate.id] = aggregate
                self._kept.move_to_end(aggregate.id)
            while len(self._kept) > self._size:
                self._kept.popitem(last=False)
