"""`unavailable()`, the one way a test gives up on a missing service: a skip on a developer's
machine, a failure under CI=true, so CI never passes by skipping."""

from __future__ import annotations

import pytest

from tests import conftest


def test_a_missing_service_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conftest, "IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match=r"CI=true: tests needing it must not skip"):
        conftest.unavailable("Redis is not reachable")


def test_a_missing_service_skips_with_its_reason_elsewhere(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conftest, "IN_CI", False)
    with pytest.raises(pytest.skip.Exception, match="Redis is not reachable"):
        conftest.unavailable("Redis is not reachable")


def test_an_unreachable_port_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(conftest, "IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match=r"127\.0\.0\.1:9\b"):
        conftest.require_service("nothing", "127.0.0.1", 9)  # the discard port: nobody listens
