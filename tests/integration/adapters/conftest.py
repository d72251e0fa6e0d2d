"""Fixtures of the adapter tests: a scripted RunPod stub (see runpod_stub)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.adapters.runpod_stub import StubRunPod


@pytest.fixture
def stub() -> Iterator[StubRunPod]:
    s = StubRunPod()
    s.thread.start()
    yield s
    s.server.shutdown()
    s.server.server_close()


@pytest.fixture
def slept() -> list[float]:
    return []
