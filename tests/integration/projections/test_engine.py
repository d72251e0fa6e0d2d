"""The projection engine on SQLite and PostgreSQL: exactly-once batches, locking, rebuild."""

from __future__ import annotations

import linecache
import sys
import threading
import time
from collections.abc import Iterable

import pytest

from projections.store.base import BulkWriter, DocText, ViewBusyError
from projections.store.engine import ProjectionSet, Projector
from tests.integration.projections.conftest import World
from tests.unit.projections.toy import EventCount, Exploding, StartedOnly, TallyView


def _record_history(world: World, tallies: int = 12, bumps: int = 7) -> int:
    """Interleaved history across three orgs; returns the last notification id."""
    ids = []
    for i in range(tallies):
        tally_id, _ = world.app.start(f"org{i % 3}", f"t{i:02d}", bumps=i % 4)
        ids.append(tally_id)
    for round_ in range(bumps):
        for tally_id in ids[round_ % 2 :: 2]:
            world.app.bump(tally_id)
    return world.app.finish(ids[0])


def test_run_once_applies_every_event_in_batches_and_records_the_position(world: World) -> None:
    head = _record_history(world)
    projector = Projector(world.app, world.store, EventCount(), batch_size=10)

    assert projector.run_once() == head
    assert world.store.position("event_count") == head
    assert world.store.get("event_count", "*", "count") == {"events": head, "last": head}
    assert projector.run_once() == 0


def test_an_error_mid_batch_leaves_docs_and_position_unchanged_and_a_rerun_applies_once(
    world: World,
) -> None:
    first = _record_history(world, tallies=4, bumps=2)
    Projector(world.app, world.store, TallyView()).run_once()
    before = world.store.digest("tallies")
    more = world.app.start("org0", "late", bumps=5)[1]

    crashing = Projector(world.app, world.store, Exploding(TallyView(), at=more - 1))
    with pytest.raises(RuntimeError, match="boom"):
        crashing.run_once()

    assert world.store.position("tallies") == first
    assert world.store.digest("tallies") == before
    assert Projector(world.app, world.store, TallyView()).run_once() == more - first
    late = [doc for _, doc in world.store.list("tallies", "org0") if doc["label"] == "late"]
    assert late == [{"label": "late", "total": 5, "bumps": 5, "at": more}]


def test_rebuild_gives_the_same_digest_as_the_live_view(world: World) -> None:
    live = Projector(world.app, world.store, TallyView(), batch_size=5)
    _record_history(world, tallies=6, bumps=3)
    live.run_once()
    head = _record_history(world, tallies=5, bumps=4)
    live.run_once()

    shadow = Projector(world.app, world.store, TallyView(), view="tallies__rebuild")
    assert shadow.rebuild() == head
    assert world.store.position("tallies__rebuild") == head == world.store.position("tallies")
    assert world.store.digest("tallies__rebuild") == world.store.digest("tallies")
    assert len(world.store.list_all("tallies")) == 9  # 11 tallies started, 2 finished

    digest = world.store.digest("tallies")
    assert live.rebuild() == head
    assert world.store.digest("tallies") == digest


def test_catch_up_to_runs_the_projection_when_nobody_else_does(world: World) -> None:
    head = _record_history(world, tallies=3, bumps=2)
    projector = Projector(world.app, world.store, TallyView(), batch_size=2)

    assert projector.catch_up_to(head - 2, timeout=5)
    assert head - 2 <= world.store.position("tallies") < head
    assert projector.catch_up_to(head, timeout=5)
    assert world.store.position("tallies") == head
    assert not projector.catch_up_to(head + 1, timeout=0.2)


def test_catch_up_to_polls_while_another_instance_holds_the_view(world: World) -> None:
    head = _record_history(world, tallies=2, bumps=1)
    projector = Projector(world.app, world.store, EventCount())
    other = Projector(world.app, world.new_store(), EventCount())
    held = threading.Event()
    release = threading.Event()

    def hold_then_run() -> None:
        with other.store.batch("event_count"):
            held.set()
            release.wait(5)
        other.run_once()

    thread = threading.Thread(target=hold_then_run)
    thread.start()
    try:
        held.wait(5)
        with pytest.raises(ViewBusyError):
            projector.store.batch("event_count", wait=False).__enter__()
        threading.Timer(0.3, release.set).start()
        started = time.monotonic()
        assert projector.catch_up_to(head, timeout=5)
        assert time.monotonic() - started >= 0.25
    finally:
        release.set()
        thread.join()
    assert world.store.get("event_count", "*", "count") == {"events": head, "last": head}


def test_two_instances_running_concurrently_never_double_apply(world: World) -> None:
    writing = threading.Event()
    writing.set()
    errors: list[BaseException] = []
    writer_app = world.new_app()

    def write() -> None:
        try:
            tally_id, _ = writer_app.start("org0", "busy")
            for _ in range(80):
                writer_app.bump(tally_id, times=3)
        finally:
            writing.clear()

    def project(projector: Projector) -> None:
        try:
            while writing.is_set():
                projector.run_once()
            projector.run_once()
        except BaseException as e:
            errors.append(e)

    instances = [
        Projector(world.new_app(), world.new_store(), EventCount(), batch_size=7) for _ in range(2)
    ]
    threads = [threading.Thread(target=project, args=(p,)) for p in instances]
    threads.append(threading.Thread(target=write))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    head = world.app.recorder.max_notification_id() or 0

    assert errors == []
    assert head == 241
    assert world.store.position("event_count") == head
    assert world.store.get("event_count", "*", "count") == {"events": head, "last": head}


def test_a_topic_filter_reads_only_its_events_but_tracks_up_to_the_head(world: World) -> None:
    head = _record_history(world, tallies=4, bumps=2)
    projector = Projector(world.app, world.store, StartedOnly(), batch_size=2)

    assert projector.run_once() == 4
    assert world.store.position("started") == head
    assert projector.catch_up_to(head, timeout=1)


def test_run_forever_keeps_the_view_current_until_stopped(world: World) -> None:
    projectors = ProjectionSet(
        [Projector(world.app, world.store, p) for p in (TallyView(), EventCount())]
    )
    projectors.start(poll_interval=0.05)
    try:
        head = _record_history(world, tallies=2, bumps=2)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not all(
            world.store.position(v) >= head for v in ("tallies", "event_count")
        ):
            time.sleep(0.01)
        assert projectors.catch_up_to(head, timeout=0.5)
    finally:
        projectors.stop()
    assert world.store.get("event_count", "*", "count") == {"events": head, "last": head}
    assert projectors.run_once() == {"tallies": 0, "event_count": 0}


@pytest.mark.parametrize("page", [1, 3, 1000])
def test_a_rebuild_in_pages_writes_rewritten_and_deleted_documents_like_the_live_path(
    world: World, page: int
) -> None:
    """Tallies are bumped and finished (deleted) pages after they were written."""
    live = Projector(world.app, world.store, TallyView(), batch_size=4)
    head = _record_history(world, tallies=8, bumps=5)
    live.run_once()

    shadow = Projector(world.app, world.store, TallyView(), view="t__r", rebuild_batch_size=page)
    assert shadow.rebuild() == head
    assert world.store.position("t__r") == head
    assert world.store.list_all("t__r") == world.store.list_all("tallies")
    assert world.store.digest("t__r") == world.store.digest("tallies")


def test_a_rebuild_writes_each_view_once_when_the_log_is_read_in_key_order(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In key order, PostgreSQL's primary key grows at its right edge: page by page, new keys
    landed all over it (bench/projection_rebuild.py)."""
    head = _record_history(world, tallies=8, bumps=5)
    writes: list[tuple[str, list[tuple[str, str]]]] = []
    replace_views = world.store.replace_views

    def spied(views: list[str]) -> BulkWriter:
        writer = replace_views(views)
        write = writer.write

        def recorded(view: str, documents: Iterable[DocText]) -> None:
            rows = list(documents)
            writes.append((view, [(org_id, key) for org_id, key, _doc in rows]))
            write(view, rows)

        monkeypatch.setattr(writer, "write", recorded)
        return writer

    monkeypatch.setattr(world.store, "replace_views", spied)
    projectors = [
        Projector(world.app, world.store, view, rebuild_batch_size=3)
        for view in (TallyView(), EventCount())
    ]
    ProjectionSet(projectors).rebuild()
    assert world.store.position("tallies") == world.store.position("event_count") == head
    assert [view for view, _keys in writes] == ["tallies", "event_count"]
    for view, keys in writes:
        assert keys == sorted(keys)
        assert keys == [(org_id, key) for org_id, key, _doc in world.store.list_all(view)]


def test_a_failing_rebuild_leaves_the_view_as_it_was(world: World) -> None:
    """The rebuild writes in one transaction: an error rolls back every page written so far."""
    head = _record_history(world, tallies=6, bumps=3)
    Projector(world.app, world.store, TallyView()).run_once()
    before = world.store.digest("tallies")

    crashing = Projector(
        world.app, world.store, Exploding(TallyView(), at=head - 1), rebuild_batch_size=2
    )
    with pytest.raises(RuntimeError, match="boom"):
        crashing.rebuild()

    assert world.store.position("tallies") == head
    assert world.store.digest("tallies") == before
    assert len(world.store.list_all("tallies")) == 5
    more = world.app.start("org1", "after", bumps=2)[1]
    assert Projector(world.app, world.store, TallyView()).run_once() == more - head


def _until_at_the_view_lock(thread: threading.Thread, timeout: float = 10) -> None:
    """Until `thread` is taking a view's write lock (SQLite's `BEGIN IMMEDIATE`, PostgreSQL's
    advisory lock): held by the test's writer, it cannot get past that line."""
    deadline = time.monotonic() + timeout
    while True:
        frame = sys._current_frames().get(thread.ident or 0)
        while frame is not None:
            if frame.f_code.co_filename.endswith(("store/sqlite.py", "store/postgres.py")):
                line = linecache.getline(frame.f_code.co_filename, frame.f_lineno)
                # PostgreSQL's batch sends the lock in a pipeline with the position's read,
                # and waits for the lock at that read.
                if "BEGIN IMMEDIATE" in line or (
                    frame.f_code.co_qualname == "PostgresViewBatch.__init__"
                    and ("xact_lock(" in line or "_read_position(" in line)
                ):
                    return
            frame = frame.f_back
        assert thread.is_alive(), "the batch ended without waiting for the lock"
        assert time.monotonic() < deadline, "never reached the view's lock"
        time.sleep(0.005)


def test_a_live_batch_waits_for_a_rebuild_and_continues_from_its_position(world: World) -> None:
    head = _record_history(world, tallies=4, bumps=2)
    writer = world.store.replace_views(["tallies"])  # what a rebuild holds while it runs
    other = Projector(world.new_app(), world.new_store(), TallyView())
    done: list[int] = []
    t = threading.Thread(target=lambda: done.append(other.run_once()))
    t.start()
    try:
        _until_at_the_view_lock(t)
        assert done == []  # blocked on the view's lock
    except BaseException:
        writer.commit({"tallies": head})  # let the thread end, then fail
        t.join(10)
        raise
    writer.commit({"tallies": head})  # an (empty) rebuilt view up to head
    t.join(10)
    assert done == [0]  # nothing after the rebuilt position
    assert world.store.position("tallies") == head
