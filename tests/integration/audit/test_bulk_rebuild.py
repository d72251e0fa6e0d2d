"""Every real view rebuilt from one read of the log (`rebuild_views`) equals the view
the live path built event batch by event batch, audit hash chain included, on SQLite and
PostgreSQL; a rebuilt view resumes live following from the position the rebuild recorded."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from application.log import TensorantLog
from projections.store import engine, logscan
from projections.store.engine import (
    ProjectionSet,
    Projector,
    rebuild_views,
    rebuild_views_in_processes,
    share_views,
)
from projections.store.logscan import StoredLog
from projections.store.sqlite import SQLiteViewStore
from projections.store.urls import open_view_store
from projections.views.audit import AUDIT, AuditView, verify
from projections.views.registry import all_projections
from tests.builders import volume
from tests.conftest import POSTGRES_URL
from tests.fakes import GOOD_KEY
from tests.integration.audit.conftest import World
from tests.integration.billing.history import drive_history

GPU = "NVIDIA A100 80GB PCIe"


def _digests(world: World, suffix: str = "") -> dict[str, str]:
    return {p.name: world.views.digest(p.name + suffix) for p in all_projections()}


@pytest.mark.parametrize("page", [7, 20_000])  # many pages (documents rewritten and deleted
# across the writer's calls) and a single page
def test_every_view_rebuilt_in_one_pass_equals_the_live_views(world: World, page: int) -> None:
    head = world.log.recorder.max_notification_id()
    live = _digests(world)
    stats = rebuild_views(
        world.log,
        world.views,
        [(f"{p.name}__bulk", p) for p in all_projections()],
        page=page,
    )

    assert stats.read == head  # the log was read once for all nine views
    assert stats.position == head
    for p in all_projections():
        view = f"{p.name}__bulk"
        assert world.views.position(view) == head == world.views.position(p.name)
        assert world.views.digest(view) == live[p.name], p.name
        assert stats.documents[view] == len(world.views.list_all(p.name)), p.name
    # The audit chain: each organization's head document is the one the live path computed.
    for org in world.orgs:
        assert world.views.get(AUDIT + "__bulk", org.org_id, "chain") == world.views.get(
            AUDIT, org.org_id, "chain"
        )
        assert world.views.get(AUDIT, org.org_id, "chain")["count"] > 10


def test_rebuilt_views_resume_live_following_where_the_rebuild_stopped(world: World) -> None:
    """Rebuild the deployment's own views in place, append events, follow them live: the views
    equal views built only the live way over the whole log, and the audit chain verifies."""
    before = world.log.recorder.max_notification_id()
    applied = world.projections.rebuild()
    assert applied["audit"] == before
    assert {v: world.views.position(v) for v in applied} == dict.fromkeys(applied, before)

    clock = world.app.clock
    drive_history(world.app, clock.advance, [("Initech", GOOD_KEY, volume())], GPU, "1.64", 1)
    after = world.log.recorder.max_notification_id()
    assert after > before

    followed = world.projections.run_once()
    assert followed["audit"] == after - before  # each new event once, none of the old ones
    assert all(world.views.position(v) == after for v in followed)

    only_live = ProjectionSet(
        [Projector(world.log, world.views, p, view=f"{p.name}__live") for p in all_projections()]
    )
    only_live.run_once()
    assert _digests(world) == _digests(world, "__live")
    result = verify(world.log, world.views)
    assert result.ok and result.events_checked == after


def _open(env: dict[str, str], views: str) -> tuple[TensorantLog, Any]:
    """A rebuild process's log and views (module level: the spawned process imports it)."""
    store = open_view_store(views) if views.startswith("postgresql") else SQLiteViewStore(views)
    return TensorantLog(env), store


def test_views_shared_among_processes_equal_the_live_views(world: World, tmp_path: Any) -> None:
    """`rebuild_views_in_processes` (`tensorant projections rebuild --processes N`): the views
    in groups of about equal cost, each group rebuilt by its own process from its own read of
    the log, equal the views the live path built."""
    groups = share_views([(p.name, p) for p in all_projections()], 2)
    assert groups[0][0][0] == "audit"  # the heaviest first, then the rest to the lighter group
    loads = [sum(p.rebuild_weight for _, p in g) for g in groups]
    assert abs(loads[0] - loads[1]) <= max(p.rebuild_weight for _, p in groups[0][1:])
    assert sorted(n for g in groups for n, _ in g) == sorted(p.name for p in all_projections())
    head = world.log.recorder.max_notification_id()
    live = _digests(world)
    if world.env["PERSISTENCE_MODULE"].endswith("sqlite"):
        views = str(tmp_path / "views.db")
    else:
        views = f"{POSTGRES_URL}?schema={world.env['POSTGRES_SCHEMA']}"
    opener = partial(_open, world.env, views)
    stats = rebuild_views_in_processes(
        opener, [(f"{p.name}__shared", p) for p in all_projections()], 2, page=50
    )
    assert stats.read == 2 * head  # each process read the whole log
    assert stats.position == head
    assert [views for views, _, _ in stats.processes] == [
        tuple(f"{name}__shared" for name, _ in g) for g in groups
    ]
    assert all(0 < wall <= stats.total_s and cpu > 0 for _, wall, cpu in stats.processes)
    for p in all_projections():
        assert world.views.digest(f"{p.name}__shared") == live[p.name], p.name
        assert world.views.position(f"{p.name}__shared") == head


def test_the_audit_rebuilt_from_stored_rows_equals_it_rebuilt_from_decoded_events(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild hashes the audit chain from the stored rows (`AuditView.apply_stored`), and
    decodes the rows whose state `StoredLog.state` cannot read: either way, and with the two
    interleaved in one chain, the view is the one the live path built from decoded events."""
    live = world.views.digest(AUDIT)
    fast = rebuild_views(world.log, world.views, [("audit__rows", AuditView())])
    assert world.views.digest("audit__rows") == live

    calls = {"state": 0, "apply": 0}
    # every decoded event, live path or a row `apply_stored` decodes, goes through this
    state, apply = StoredLog.state, AuditView._apply_event

    def every_other(stored: bytes) -> Any:
        calls["state"] += 1
        return state(stored) if calls["state"] % 2 else None

    def counted(self: AuditView, *args: Any) -> None:
        calls["apply"] += 1
        apply(self, *args)

    monkeypatch.setattr(StoredLog, "state", staticmethod(every_other))
    monkeypatch.setattr(AuditView, "_apply_event", counted)
    rebuild_views(world.log, world.views, [("audit__mixed", AuditView())])
    assert world.views.digest("audit__mixed") == live
    assert calls["apply"] == calls["state"] // 2 > 10  # half the rows decoded

    monkeypatch.setattr(logscan, "stored_log", lambda app: None)  # a cipher, say
    monkeypatch.setattr(engine, "stored_log", lambda app: None)
    calls["apply"] = 0
    rebuild_views(world.log, world.views, [("audit__decoded", AuditView())])
    assert world.views.digest("audit__decoded") == live
    assert calls["apply"] == fast.events["audit__rows"] == fast.read
