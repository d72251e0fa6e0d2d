"""The audit view keeps each entry's position and hash in blocks; what an entry says is read
from the log at its position (U1). Every entry of the legacy log reads as the view kept it when
it copied each event, and a view built by that earlier layout is rebuilt when its projector
starts."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest
from eventsourcing.application import Application

from projections.store.engine import LAYOUT, ProjectionSet, Projector
from projections.store.sqlite import SQLiteViewStore
from projections.views import audit
from projections.views.audit import AUDIT, BLOCK, INDEX, AuditView, entries, verify
from tests.fixtures.legacy_log.write_log import HERE as FIXTURE
from tests.fixtures.legacy_log.write_log import legacy_log


@pytest.fixture
def legacy(tmp_path: Path) -> Iterator[Application[UUID]]:
    log = legacy_log(tmp_path)
    yield log
    log.close()


@pytest.fixture
def views(tmp_path: Path) -> Iterator[SQLiteViewStore]:
    store = SQLiteViewStore(str(tmp_path / "views.sqlite"))  # a file: the projectors' threads
    yield store
    store.close()


# audit_entries.json: the audit view's `e:` documents of this log, per organization, as the
# code before the block layout wrote them (4 organizations, 139 entries: every event).
KEPT: dict[str, list[dict[str, object]]] = json.loads((FIXTURE / "audit_entries.json").read_text())


@pytest.mark.parametrize("block", [BLOCK, 3])  # one block per organization; dozens of them
def test_every_entry_reads_as_the_view_kept_it(
    legacy: Application[UUID], views: SQLiteViewStore, block: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(audit, "BLOCK", block)
    Projector(legacy, views, AuditView()).run_once()
    assert max(len(views.list(AUDIT, org, "b:")) for org in KEPT) > (20 if block == 3 else 0)
    assert sum(map(len, KEPT.values())) == 139 == legacy.recorder.max_notification_id()
    for org, kept in KEPT.items():
        assert entries(legacy, views, org, limit=1000) == kept, org
        # paged by position, and filtered by type and by aggregate as the view was
        middle = kept[len(kept) // 2]["position"]
        assert (
            entries(legacy, views, org, after=middle, limit=3)
            == [e for e in kept if e["position"] > middle][:3]
        )
        for field, arg in (("type", "type_"), ("aggregate_id", "aggregate_id")):
            value = kept[-1][field]
            found = entries(legacy, views, org, limit=1000, **{arg: value})
            assert found == [e for e in kept if e[field] == value], (org, field)
            assert found


@pytest.mark.parametrize("built", ["live", "rebuilt"])  # from events; from stored rows
def test_entries_are_kept_in_blocks_of_positions(
    legacy: Application[UUID], views: SQLiteViewStore, built: str
) -> None:
    projector = Projector(legacy, views, AuditView())
    if built == "live":
        projector.run_once()
    else:
        assert projector.rebuild() == 139
    for org, kept in KEPT.items():
        blocks = views.list(AUDIT, org, "b:")
        assert [p for _, b in blocks for p in b["p"]] == [e["position"] for e in kept]
        assert [h for _, b in blocks for h in b["h"]] == [e["hash"] for e in kept]
        for key, block in blocks:
            assert {(p - 1) // BLOCK for p in block["p"]} == {int(key.removeprefix("b:"))}


def _as_an_earlier_layout_built_it(views: SQLiteViewStore) -> str:
    """Turn the built audit view into what layout 1 left: an `e:` document per entry, no
    blocks, no layout document. Returns an organization's id."""
    org = next(iter(KEPT))
    with views.batch(AUDIT) as b:
        for o, kept in KEPT.items():
            for key, _ in views.list(AUDIT, o, "b:"):
                b.delete(o, key)
            for e in kept:
                b.put(o, f"e:{e['position']:020d}", e)
        b.delete(*LAYOUT)
    return org


def test_a_view_of_the_earlier_layout_is_rebuilt_when_its_projector_starts(
    legacy: Application[UUID], views: SQLiteViewStore
) -> None:
    projections = ProjectionSet([Projector(legacy, views, AuditView())])
    projections.run_once()
    built = views.digest(AUDIT)
    assert views.get(AUDIT, *LAYOUT) == {"layout": 2}
    org = _as_an_earlier_layout_built_it(views)
    assert views.digest(AUDIT) != built
    assert entries(legacy, views, org) == []  # what the new code reads is not there yet

    projections.start(poll_interval=0.05)
    try:
        deadline = time.monotonic() + 10
        while views.get(AUDIT, *LAYOUT) is None and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        projections.stop()
    assert views.digest(AUDIT) == built  # the `e:` documents are gone, the blocks back
    assert entries(legacy, views, org, limit=1000) == KEPT[org]
    assert verify(legacy, views).ok
    assert not projections[AUDIT].upgrade()  # once is enough
    assert views.get(AUDIT, INDEX, "layout") == {"layout": 2}
