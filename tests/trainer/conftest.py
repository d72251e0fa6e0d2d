"""The SIGTERM test's trainer process starts as soon as the tiny model exists, so its imports and
training overlap the in-process tests instead of adding to them (the session has two cores)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _start_the_pod_process_early(request: pytest.FixtureRequest) -> None:
    if any(item.name.startswith("test_sigterm") for item in request.session.items):
        request.getfixturevalue("pod_process")
