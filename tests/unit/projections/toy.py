"""A toy aggregate, application and projections for exercising the projection engine."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, DomainEventProtocol, event
from eventsourcing.utils import get_topic

from projections.store.base import DocKey, ViewBatch


class Tally(Aggregate):
    """Counts bumps; every event names its organization."""

    class Started(Aggregate.Created):
        org_id: str
        label: str

    class Bumped(Aggregate.Event):
        org_id: str
        by: int

    class Closed(Aggregate.Event):
        org_id: str

    @event(Started)
    def __init__(self, org_id: str, label: str) -> None:
        self.org_id = org_id
        self.label = label
        self.total = 0

    def bump(self, by: int = 1) -> None:
        self._bump(org_id=self.org_id, by=by)

    @event(Bumped)
    def _bump(self, org_id: str, by: int) -> None:
        self.total += by

    def close(self) -> None:
        self._close(org_id=self.org_id)

    @event(Closed)
    def _close(self, org_id: str) -> None:
        pass


class ToyApp(Application[UUID]):
    """Service layer for tallies; commands return the last notification id they recorded."""

    def start(self, org_id: str, label: str, bumps: int = 0) -> tuple[UUID, int]:
        tally = Tally(org_id=org_id, label=label)
        for _ in range(bumps):
            tally.bump()
        recordings = self.save(tally)
        return tally.id, recordings[-1].notification.id

    def bump(self, tally_id: UUID, times: int = 1) -> int:
        tally: Tally = self.repository.get(tally_id)
        for _ in range(times):
            tally.bump()
        return self.save(tally)[-1].notification.id

    def finish(self, tally_id: UUID) -> int:
        tally: Tally = self.repository.get(tally_id)
        tally.close()
        return self.save(tally)[-1].notification.id


class TallyView:
    """One document per tally: label, total, number of bumps; deleted when closed."""

    name = "tallies"

    def keys(self, e: DomainEventProtocol[Any]) -> Iterable[DocKey]:
        return [(getattr(e, "org_id", ""), str(e.originator_id))]

    def apply(self, batch: ViewBatch, e: DomainEventProtocol[Any], position: int) -> None:
        key = str(e.originator_id)
        if isinstance(e, Tally.Started):
            batch.put(e.org_id, key, {"label": e.label, "total": 0, "bumps": 0, "at": position})
        elif isinstance(e, Tally.Bumped):
            doc = batch.get(e.org_id, key)
            assert doc is not None
            doc["total"] += e.by
            doc["bumps"] += 1
            doc["at"] = position
            batch.put(e.org_id, key, doc)
        elif isinstance(e, Tally.Closed):
            batch.delete(e.org_id, key)


class EventCount:
    """A single counter document: applying any event twice would show."""

    name = "event_count"

    def apply(self, batch: ViewBatch, e: DomainEventProtocol[Any], position: int) -> None:
        doc = batch.get("*", "count") or {"events": 0, "last": 0}
        assert position > doc["last"], "notifications must arrive in order, once"
        doc["events"] += 1
        doc["last"] = position
        batch.put("*", "count", doc)


class StartedOnly:
    """Reads only Started events (topic filter)."""

    name = "started"
    topics = (get_topic(Tally.Started),)

    def apply(self, batch: ViewBatch, e: DomainEventProtocol[Any], position: int) -> None:
        assert isinstance(e, Tally.Started)
        batch.put(e.org_id, str(e.originator_id), {"label": e.label})


class Exploding:
    """Wraps a projection and raises when it reaches a given notification id."""

    def __init__(self, inner: Any, at: int) -> None:
        self.inner = inner
        self.name = inner.name
        self.at = at

    def apply(self, batch: ViewBatch, e: DomainEventProtocol[Any], position: int) -> None:
        if position == self.at:
            msg = f"boom at {position}"
            raise RuntimeError(msg)
        self.inner.apply(batch, e, position)
