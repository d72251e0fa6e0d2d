"""REST v2 quotas: paced bursts lose nothing and never meet a second 429 in one window.

The sandbox counts every authenticated /v2 request and every 429 it gave; the adapters pace on
the sandbox clock (their sleeps advance it), so minutes of quota windows cost no wall time.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise

import httpx
import pytest

from adapters.runpod import RunPodCompute, make_compute
from runpod_sandbox import Sandbox
from tests.integration.adapters.contract_compute import spec

QUOTA = 10


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(startup_seconds=0.05) as sb:
        sb.set_faults(rate_limit_per_minute=QUOTA)
        yield sb


def adapter(sandbox: Sandbox, label: str) -> RunPodCompute:
    return make_compute(
        "rest",
        sandbox.base_url,
        timeout_s=5,
        client_label=label,
        sleep=sandbox.advance_clock,
        now=lambda: sandbox.model.clock.now().timestamp(),
        account_via_graphql=False,
    )


def burst(provider: RunPodCompute, key: str, tag: str, launches: int = 3) -> list[str]:
    """A reconciler's reads and a few launches, interleaved; returns the launched Pod ids."""
    ids = []
    for i in range(launches):
        for _ in range(4):
            provider.list_pods(key)
        pod = provider.launch_pod(key, spec(f"tensorant-run-{tag}-{i}"))
        assert provider.get_pod(key, pod.id) is not None
        ids.append(pod.id)
    return ids


def drain(sandbox: Sandbox, key: str) -> None:
    """Someone else with the same key (the console, a script) spends what is left this minute."""
    with httpx.Client(
        base_url=sandbox.base_url,
        headers={"Authorization": f"Bearer {key}", "User-Agent": "console"},
    ) as console:
        while console.get("/v2/network-volumes").status_code != 429:
            pass


def per_client(sandbox: Sandbox) -> dict[str, list[int]]:
    seen: dict[str, list[int]] = {}
    for client, status, _window in sandbox.model.rate_limiter.log.entries:
        seen.setdefault(client, []).append(status)
    return seen


def test_one_client_paces_itself_below_the_quota_and_never_gets_a_429(sandbox: Sandbox) -> None:
    key = str(sandbox.credentials()["api_key"])
    provider = adapter(sandbox, "worker-1")
    ids = burst(provider, key, "solo")
    assert len({p.name for p in sandbox.model.all_pods()}) == len(ids) == 3
    counts = sandbox.model.rate_limiter.log.counts()
    assert counts[429] == 0
    assert sum(counts.values()) == provider.billing.http.requests > QUOTA  # it spanned windows
    assert provider.billing.http.tracker.waited_s > 0  # it slowed down before the quota was gone


def test_clients_sharing_a_key_never_meet_two_429s_in_a_row_and_lose_nothing(
    sandbox: Sandbox,
) -> None:
    key = str(sandbox.credentials()["api_key"])
    a, b = adapter(sandbox, "worker-a"), adapter(sandbox, "worker-b")
    launched = []
    for i in range(3):  # interleaved, and others drain the quota behind the workers' backs
        launched += burst(a, key, f"a{i}", launches=1)
        drain(sandbox, key)
        launched += burst(b, key, f"b{i}", launches=1)
        drain(sandbox, key)
    names = sorted(p.name for p in sandbox.model.all_pods())
    assert len(names) == len(set(names)) == len(launched) == 6  # no operation lost or doubled
    entries = [e for e in sandbox.model.rate_limiter.log.entries if e[0] != "console"]
    throttled = [e for e in entries if e[1] == 429]
    assert throttled, "a drained quota was expected to surprise the workers at least once"
    for client, statuses in per_client(sandbox).items():
        if client == "console":
            continue
        pairs = pairwise(statuses)
        assert not any(x == y == 429 for x, y in pairs), f"{client}: two 429s in a row"
    for client in {c for c, _, _ in throttled}:
        windows = [w for c, _, w in throttled if c == client]
        assert len(windows) == len(set(windows)), f"{client}: a second 429 in one window"
    assert a.billing.http.throttled + b.billing.http.throttled == len(throttled)
