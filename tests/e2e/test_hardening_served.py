"""Security round three (issue 50) against `tensorant serve --sandbox` as a user starts it: a
process of its own, the probe's requests sent to it over HTTP from the loopback address, as the
probe sent them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.served import Served, serve

LIMIT = 3


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    path: Path = tmp_path_factory.mktemp("served")
    with serve(path, auth_failure_limit=str(LIMIT), failure_window_s="60") as process:
        process.wait_healthy()
        process.owner_token()
        yield process


def _problem(r: httpx.Response, status: int, slug: str) -> None:
    assert r.status_code == status, r.text
    assert r.json()["type"] == f"https://tensorant.dev/problems/{slug}", r.text


# ---------------------------------------------------------------- N7: X-Forwarded-For
def test_n7_rotating_x_forwarded_for_from_an_untrusted_peer_is_throttled(served: Served) -> None:
    with httpx.Client(base_url=served.base_url, timeout=30) as http:
        bad = {"Authorization": "Bearer tnt_" + "0" * 43}
        for i in range(LIMIT):
            forged = {**bad, "X-Forwarded-For": f"203.0.113.{i + 1}"}
            _problem(http.get("/v1/me", headers=forged), 401, "unauthenticated")
        forged = {**bad, "X-Forwarded-For": f"198.51.100.{uuid.uuid4().int % 250 + 1}"}
        r = http.get("/v1/me", headers=forged)
        _problem(r, 429, "too-many-failures")
        assert int(r.headers["Retry-After"]) >= 1
        # The console's sign-in counts on the same key: a fresh forged address does not help.
        page = http.get("/", headers={"X-Forwarded-For": "192.0.2.77"})
        assert page.status_code == 200
