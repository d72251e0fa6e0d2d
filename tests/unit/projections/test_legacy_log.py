"""Stored data from before the reorganisation still loads (docs/architecture.md, The one log):
replaying the log that the previous layout wrote rebuilds every view to the digest it had then."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest
from eventsourcing.application import Application

from tests.fixtures.legacy_log.write_log import HERE as FIXTURE
from tests.fixtures.legacy_log.write_log import legacy_log, view_digests, write_history


@pytest.fixture
def legacy(tmp_path: Path) -> Iterator[Application[UUID]]:
    log = legacy_log(tmp_path)
    yield log
    log.close()


def topics(log: Application[UUID]) -> set[str]:
    return {n.topic for n in log.recorder.select_notifications(1, 100_000)}


def test_the_legacy_log_rebuilds_every_view_to_the_digest_it_had(legacy: Application[UUID]) -> None:
    expected = json.loads((FIXTURE / "digests.json").read_text())
    assert view_digests(legacy) == expected


def test_every_aggregate_in_the_legacy_log_loads(legacy: Application[UUID]) -> None:
    notes = legacy.recorder.select_notifications(1, 100_000)
    assert len(notes) > 100
    for originator in {n.originator_id for n in notes}:
        aggregate = legacy.repository.get(originator)
        assert aggregate.version >= 1


def test_a_log_written_today_covers_every_event_type_of_the_legacy_log(
    legacy: Application[UUID], tmp_path: Path
) -> None:
    """The script that wrote the fixture still runs, and still meets every kind of event."""
    services = write_history(tmp_path / "today.sqlite")
    try:
        assert topics(legacy) <= topics(services.log)
        digests = json.loads((FIXTURE / "digests.json").read_text())
        assert set(view_digests(services.log)) == set(digests)
    finally:
        services.close()
