"""R5/R7 through the reactions: commands only save events; the relay and actor drive the run."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from adapters.broker import EmbeddedWorker, make_broker, register_actors
from application.pods import pod_name
from application.services import Services
from projections.relay import Relay
from projections.store.sqlite import SQLiteViewStore
from tests.builders import adapter_zip
from tests.fakes import GOOD_KEY, FakeCompute, FakeObjectStore
from tests.unit.application.conftest import make_world


@dataclass
class Embedded:
    app: Services
    compute: FakeCompute
    objects: FakeObjectStore
    org: str
    run_id: str


def _eventually(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[Embedded]:
    """The `tensorant serve` arrangement: app, relay thread and in-process worker."""
    app, compute, objects, org, run_id = make_world(tmp_path)
    views = SQLiteViewStore(str(tmp_path / "views.db"))
    actors = register_actors(
        make_broker(None), app.reactor.drive_run, reconcile=app.reactor.reconcile_tick
    )
    worker = EmbeddedWorker(actors, threads=2)
    relay = Relay(app.log, views, actors, poll_interval=0.05)
    worker.start()
    relay.start()
    try:
        yield Embedded(app, compute, objects, org, run_id)
    finally:
        relay.stop()
        worker.stop()
        views.close()
        app.close()


def test_r5_r7_a_confirmed_launch_is_driven_to_success_by_the_relay_and_actor(
    embedded: Embedded,
) -> None:
    e = embedded
    e.app.runs.launch(e.org, e.run_id, "owner", True, "1.64")  # saves an event; nothing else
    assert _eventually(lambda: e.app.log.run(e.org, e.run_id).state == "running")
    assert len(e.compute.pods) == 1
    assert e.compute.find_pod_by_name(GOOD_KEY, pod_name(e.run_id)) is not None

    data = adapter_zip()
    e.objects.buckets["vol1euro"][f"runs/{e.run_id}/adapter.zip"] = data
    token = e.app.trainer.token(e.run_id)
    e.app.trainer.exported(
        e.run_id,
        token,
        f"runs/{e.run_id}/adapter.zip",
        hashlib.sha256(data).hexdigest(),
        len(data),
    )
    assert _eventually(lambda: e.app.log.run(e.org, e.run_id).state == "succeeded")
    assert e.compute.pods == {}
