"""A deployment's server settles the cyclic collector once started; a shared process keeps its own.

Why (bench/api_load.py under wrk): full collections walking start-up's objects set the p99.
"""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from rich.console import Console

from entrypoints import processes, server
from entrypoints.server import GC_YOUNG_THRESHOLD, Server
from entrypoints.settings import Settings


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})


@pytest.fixture
def collector() -> Iterator[None]:
    """The test process's collector as it was, whatever a test did to it."""
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


def _serve_until_started(settles_gc: bool) -> None:
    s = Server(uvicorn.Config(_app, port=0, log_level="warning"), settles_gc=settles_gc)
    thread = threading.Thread(target=s.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not s.started and time.monotonic() < deadline:
        time.sleep(0.01)
    assert s.started
    s.should_exit = True
    thread.join(10)


def test_a_deployments_server_freezes_start_up_and_widens_the_young_generation(
    collector: None,
) -> None:
    gc.unfreeze()
    _serve_until_started(settles_gc=True)
    assert gc.get_freeze_count() > 1000  # start-up's objects: out of every collection
    assert gc.get_threshold()[0] == GC_YOUNG_THRESHOLD


def test_a_server_sharing_a_process_leaves_its_collector_alone(collector: None) -> None:
    gc.unfreeze()
    before = gc.get_threshold()
    _serve_until_started(settles_gc=False)
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before


def test_tensorant_serve_runs_a_server_that_settles_the_collector(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[bool] = []

    class Recorded(Server):
        def run(self, sockets: Any = None) -> None:
            made.append(self.settles_gc)

    monkeypatch.setattr(server, "Server", Recorded)
    processes.serve(Settings(data_dir=tmp_path), "127.0.0.1", 0, None, Console(quiet=True))
    assert made == [True]
