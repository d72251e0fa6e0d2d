"""The projection engine on SQLite files: fast behaviour checks."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from projections.store.engine import ProjectionSet, Projector
from projections.store.sqlite import SQLiteViewStore
from tests.unit.projections.toy import EventCount, Exploding, TallyView, ToyApp


@pytest.fixture
def app(tmp_path: Path) -> Iterator[ToyApp]:
    app = ToyApp(
        env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(tmp_path / "e.db")}
    )
    yield app
    app.close()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteViewStore]:
    store = SQLiteViewStore(str(tmp_path / "views.db"))
    yield store
    store.close()


def test_a_batch_reads_at_most_batch_size_events(app: ToyApp, store: SQLiteViewStore) -> None:
    app.start("o", "t", bumps=9)
    projector = Projector(app, store, EventCount(), batch_size=4)

    assert projector.run_batch() == (4, False)
    assert projector.run_batch() == (4, False)
    assert projector.run_batch() == (2, True)
    assert store.position("event_count") == 10


def test_an_exploding_event_stops_the_view_at_the_batch_before(
    app: ToyApp, store: SQLiteViewStore
) -> None:
    app.start("o", "t", bumps=9)
    with pytest.raises(RuntimeError, match="boom at 7"):
        Projector(app, store, Exploding(EventCount(), at=7), batch_size=3).run_once()

    assert store.position("event_count") == 6
    assert store.get("event_count", "*", "count") == {"events": 6, "last": 6}


def test_closed_tallies_disappear_from_the_view(app: ToyApp, store: SQLiteViewStore) -> None:
    kept, _ = app.start("o", "kept", bumps=2)
    gone, _ = app.start("o", "gone", bumps=1)
    last = app.finish(gone)
    projector = Projector(app, store, TallyView())

    assert projector.catch_up_to(last, timeout=2)
    assert store.list("tallies", "o") == [
        (str(kept), {"label": "kept", "total": 2, "bumps": 2, "at": 3})
    ]


def test_a_projection_set_runs_every_view(app: ToyApp, store: SQLiteViewStore) -> None:
    _, last = app.start("o", "t", bumps=1)
    views = ProjectionSet([Projector(app, store, TallyView()), Projector(app, store, EventCount())])

    assert views.run_once() == {"tallies": 2, "event_count": 2}
    assert views["tallies"].position() == last
    assert views.catch_up_to(last, timeout=1)
