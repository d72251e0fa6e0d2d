"""Views that read only their aggregate's events name every one of them (`event_topics`)."""

from __future__ import annotations

import domain.orphans as o
import domain.run as r
from domain.base import EXPLICIT_TOPICS, event_topics
from domain.organization import OrganizationCreated
from projections.views.orphans import OrphansView
from projections.views.runs import RunsView


def _every_event_of(base: type) -> set[str]:
    return {c.TOPIC for c in EXPLICIT_TOPICS.values() if issubclass(c, base)}


def test_the_runs_view_reads_every_run_event_and_nothing_else() -> None:
    topics = RunsView().topics
    assert set(topics) == _every_event_of(r.Run.Event)
    assert {r.RunDrafted.TOPIC, r.PodTerminated.TOPIC, r.RunCancelled.TOPIC} <= set(topics)
    assert OrganizationCreated.TOPIC not in topics
    assert o.OrphanPodFound.TOPIC not in topics


def test_the_orphans_view_reads_every_orphan_event_and_nothing_else() -> None:
    topics = OrphansView().topics
    assert set(topics) == _every_event_of(o.OrphanPods.Event)
    assert {o.OrphanPodsOpened.TOPIC, o.OrphanPodClaimed.TOPIC} <= set(topics)
    assert r.PodLaunched.TOPIC not in topics


def test_an_event_class_defined_later_is_read_too() -> None:
    before = event_topics(r.Run.Event)

    class Later(r.Run.Event):  # what a new event in domain.run would be
        pass

    EXPLICIT_TOPICS["tensorant.test.Later"] = Later
    try:
        assert RunsView().topics == [*before, "tensorant.test.Later"]
    finally:
        del EXPLICIT_TOPICS["tensorant.test.Later"]
