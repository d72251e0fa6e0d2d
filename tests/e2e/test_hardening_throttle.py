"""Repeated failed authentications (per address) and failed RunPod key checks
(per organization) are slowed with 429 and Retry-After; the window passes and all is as before.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import Api, problem
from tests.e2e.flows import RunPodConsole, private_stack

LIMIT, CHECKS, WINDOW_S = 3, 2, 2.0


@pytest.fixture(scope="module")
def strict(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, RunPodConsole]]:
    with private_stack(
        tmp_path_factory,
        "strict",
        settings={
            "auth_failure_limit": LIMIT,
            "check_failure_limit": CHECKS,
            "failure_window_s": WINDOW_S,
        },
    ) as pair:
        yield pair


def _slowed(body: dict[str, Any], retry_after: str) -> None:
    assert 1 <= int(retry_after) <= WINDOW_S + 1, retry_after
    assert "try again in" in body["detail"]


def test_repeated_bad_tokens_from_one_address_are_slowed(
    strict: tuple[Api, RunPodConsole],
) -> None:
    api, _ = strict
    org = api.new_org()
    guesser = api.client("tnt_" + "0" * 43)
    for _ in range(LIMIT):
        problem(guesser.get("/v1/me"), 401, "unauthenticated")
    r = guesser.get("/v1/me")
    _slowed(problem(r, 429, "too-many-failures"), r.headers["Retry-After"])
    # While the address is slowed, no token is looked up from it (a guess cannot be confirmed).
    problem(org.owner.get("/v1/me"), 429, "too-many-failures")
    time.sleep(WINDOW_S + 0.2)  # fixed-sleep-ok: the window passing is tested
    assert org.owner.get("/v1/me").status_code == 200
    problem(guesser.get("/v1/me"), 401, "unauthenticated")  # counting starts afresh


def test_repeated_failed_key_checks_of_one_organization_are_slowed(
    strict: tuple[Api, RunPodConsole],
) -> None:
    api, _ = strict
    creds = api.sandbox.credentials()
    a, b = api.new_org("A"), api.new_org("B")
    for _ in range(CHECKS):
        r = a.owner.post("/v1/connections/runpod", json={"api_key": "rp_not_a_key_" + "x" * 20})
        assert r.status_code in (401, 403, 422), r.text
    r = a.owner.post("/v1/connections/runpod", json={"api_key": creds["api_key"]})
    _slowed(problem(r, 429, "too-many-failures"), r.headers["Retry-After"])
    # Another organization is not slowed by A's failures.
    r = b.owner.post("/v1/connections/runpod", json={"api_key": creds["api_key"]})
    assert r.status_code == 201, r.text
    time.sleep(WINDOW_S + 0.2)  # fixed-sleep-ok: the window passing is tested
    r = a.owner.post("/v1/connections/runpod", json={"api_key": creds["api_key"]})
    assert r.status_code == 201, r.text
