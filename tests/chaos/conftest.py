"""Chaos fixtures: a private sandbox (real-time clock, its own faults) and helpers to drive runs
over HTTP and to check the cleanup invariants against the sandbox's own Pod list."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from runpod_sandbox import Sandbox
from tests.e2e.conftest import Org

SETTLED = ("succeeded", "failed", "cancelled", "needs_recovery")


@pytest.fixture(scope="module")
def box() -> Iterator[Sandbox]:
    """Never advance this clock: workers in other processes use the system clock."""
    with Sandbox(startup_seconds=0.1) as sb:
        yield sb


def with_retries(call: Any, *, ok: tuple[int, ...], attempts: int = 15) -> httpx.Response:
    """Repeat a request the provider's faults made fail (503 provider-unavailable and the like)."""
    response: httpx.Response = call()
    for _ in range(attempts):
        if response.status_code in ok or response.status_code < 500:
            return response
        time.sleep(0.2)
        response = call()
    return response


def all_pods(box: Sandbox) -> list[dict[str, Any]]:
    answer = httpx.get(f"{box.base_url}/_sandbox/pods", timeout=30)
    pods: list[dict[str, Any]] = answer.json()["pods"]
    return pods


def uncovered_pods(box: Sandbox, orgs: list[Org]) -> list[dict[str, Any]]:
    """Pods billing at RunPod (not TERMINATED) that no organization's /v1/cleanup lists."""
    listed = {i["pod_id"] for o in orgs for i in o.member.get("/v1/cleanup").json()["items"]}
    return [p for p in all_pods(box) if p["status"] != "TERMINATED" and p["id"] not in listed]


def wait_until_covered(box: Sandbox, orgs: list[Org], timeout: float = 15) -> list[dict[str, Any]]:
    """The views and the reconciler are eventually consistent: allow them a bounded moment."""
    deadline = time.monotonic() + timeout
    missing = uncovered_pods(box, orgs)
    while missing and time.monotonic() < deadline:
        time.sleep(0.3)
        missing = uncovered_pods(box, orgs)
    return missing


def states(org: Org, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    return {rid: org.member.get(f"/v1/runs/{rid}").json() for rid in run_ids}


def wait_settled(org: Org, run_ids: list[str], timeout: float) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + timeout
    docs = states(org, run_ids)
    while time.monotonic() < deadline:
        if all(d["state"] in SETTLED for d in docs.values()):
            return docs
        time.sleep(0.5)
        docs = states(org, run_ids)
    return docs
