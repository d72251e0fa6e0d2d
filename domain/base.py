"""The shared aggregate base: every event names its actor and carries an explicit, stable topic."""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Any, TypeVar
from uuid import NAMESPACE_URL, UUID, uuid5

from eventsourcing.domain import Aggregate, register_topic

SYSTEM = "system"

T = TypeVar("T", bound=type)

# Every explicit topic ever used, so a test can prove each event class has one.
EXPLICIT_TOPICS: dict[str, type] = {}


def topic(name: str) -> Any:
    """Give a class a stable topic (independent of its module path) and register it."""

    def decorate(cls: T) -> T:
        cls.TOPIC = name  # type: ignore[attr-defined]
        register_topic(name, cls)
        EXPLICIT_TOPICS[name] = cls
        return cls

    return decorate


def event_topics(base: type) -> list[str]:
    """The explicit topics of `base` and of every event class derived from it (those defined
    so far: a module's classes exist once it is imported), in the order they were given."""
    return [name for name, cls in EXPLICIT_TOPICS.items() if issubclass(cls, base)]


@functools.lru_cache(maxsize=4096)
def stable_id(kind: str, key: str) -> UUID:
    """Deterministic aggregate ids for one-per-organization aggregates (Connection, Storage).
    Kept for the organizations met lately: a draft's checks ask for two, each a SHA-1 (a UUID
    is immutable, so sharing one is safe)."""
    return uuid5(NAMESPACE_URL, f"tensorant:{kind}:{key}")


class TensorantAggregate(Aggregate):
    """Base for our aggregates; commands take `actor` and `at` and never read a clock."""

    class Event(Aggregate.Event):
        actor: str

    class Created(Event, Aggregate.Created):
        pass

    def _trigger(
        self, event_class: type[Aggregate.Event], actor: str, at: datetime, **kw: Any
    ) -> None:
        self.trigger_event(event_class, actor=actor, timestamp=at, **kw)
