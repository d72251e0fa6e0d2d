"""Reactions on scale-out (O2, R5): PostgreSQL event store, RabbitMQ or Redis, a worker loop."""

from __future__ import annotations

from tests.unit.broker import scenarios as s


def test_a_committed_run_event_reaches_the_actor_through_the_relay(rig: s.Rig) -> None:
    s.committed_run_event_reaches_the_actor(rig)


def test_a_message_delivered_twice_drives_the_run_once(rig: s.Rig) -> None:
    s.message_delivered_twice_drives_once(rig)


def test_the_relay_resumes_from_its_tracking_position_after_a_crash(rig: s.Rig) -> None:
    s.relay_resumes_from_its_tracking_position(rig)
