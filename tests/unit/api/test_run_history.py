"""A run's history is read from its own stream in the log (R6), no longer copied into the run
view: every line of the legacy log's runs is what the view kept when it copied them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest
from eventsourcing.application import Application

from api.actions.runs import history_line
from domain.run import RunDiscarded
from tests.fixtures.legacy_log.write_log import HERE as FIXTURE
from tests.fixtures.legacy_log.write_log import legacy_log


@pytest.fixture
def legacy(tmp_path: Path) -> Iterator[Application[UUID]]:
    log = legacy_log(tmp_path)
    yield log
    log.close()


def test_every_history_line_is_the_one_the_run_view_kept(legacy: Application[UUID]) -> None:
    # run_history.json: the run view's `event:` documents of this log, as the code before
    # this change wrote them (11 runs, 74 lines: every run event type the log holds).
    kept = json.loads((FIXTURE / "run_history.json").read_text())
    assert sum(len(lines) for lines in kept.values()) == 74
    discarded = 0
    for run_id, lines in kept.items():
        events = list(legacy.events.get(UUID(run_id)))
        if isinstance(events[-1], RunDiscarded):
            # The view kept no line for the discard (it deleted the run, so the API answers 404
            # for its history, then as now).
            events.pop()
            discarded += 1
        read = [history_line(e).model_dump() for e in events]
        assert read == lines, run_id
    assert discarded == 1
