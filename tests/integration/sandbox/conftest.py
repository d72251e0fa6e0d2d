"""Fixtures: a fresh sandbox per test (it starts in ~0.1 s) and the SDK pointed at it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import runpod

from runpod_sandbox import Sandbox


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(startup_seconds=0.2) as sb:
        yield sb


@pytest.fixture
def sdk(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The real runpod module, talking to the sandbox with the read-write key."""
    monkeypatch.setenv("RUNPOD_API_BASE_URL", sandbox.base_url)
    monkeypatch.setattr(runpod, "api_key", sandbox.credentials()["api_key"])
    return runpod
