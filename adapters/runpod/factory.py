"""Builds RunPodCompute over the wire `TENSORANT_RUNPOD_API` names (graphql|rest)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from adapters.retry import RetryPolicy
from adapters.runpod.billing import RunPodBilling
from adapters.runpod.compute import RunPodCompute
from adapters.runpod.graphql_wire import GraphQLWire
from adapters.runpod.http import RunPodHttp
from adapters.runpod.ratelimit import RateLimitTracker
from adapters.runpod.rest_wire import RestWire

APIS = ("graphql", "rest")
DEFAULT_API = "rest"  # REST v2 outlives GraphQL (retired early 2027)


def make_compute(
    api: str,
    base_url: str | None = None,
    *,
    max_attempts: int = 4,
    base_delay_s: float = 0.2,
    max_delay_s: float = 3.0,
    timeout_s: float = 30,
    sleep: Callable[[float], None] = time.sleep,
    jitter: Callable[[], float] = random.random,
    lookup_attempts: int = 4,
    now: Callable[[], float] = time.monotonic,
    low_fraction: float = 0.2,
    max_wait_s: float = 90.0,
    client_label: str = "",
    account_via_graphql: bool = True,
    stop_after_via_graphql: bool = True,
) -> RunPodCompute:
    """RunPodCompute over `api`'s wire; one HTTP client and one quota tracker serve both wires.

    `base_url` None follows RUNPOD_API_BASE_URL like the SDK. The REST v2 wire reads the account
    id and balance through GraphQL while it lives (`account_via_graphql`), and creates a Pod
    that asks for RunPod's `stopAfter` backstop through GraphQL, which alone offers it
    (`stop_after_via_graphql`); volumes are resized and billing read over REST v2 whichever
    wire is chosen.
    """
    choice = (api or DEFAULT_API).strip().lower()
    if choice not in APIS:
        raise ValueError(f"TENSORANT_RUNPOD_API must be one of {', '.join(APIS)}, not {api!r}")
    retry = RetryPolicy(max_attempts, base_delay_s, max_delay_s, sleep, jitter)
    tracker = RateLimitTracker(
        now=now, sleep=sleep, low_fraction=low_fraction, max_wait_s=max_wait_s
    )
    http = RunPodHttp(base_url, timeout_s, tracker)
    graphql = GraphQLWire(http)
    rest = RestWire(
        http,
        account_via=graphql.account if account_via_graphql else None,
        create_via=graphql.create if stop_after_via_graphql else None,
        client_label=client_label,
    )
    return RunPodCompute(
        graphql if choice == "graphql" else rest,
        volumes=rest,
        registries=rest,
        billing=RunPodBilling(http, retry, rest.headers),
        retry=retry,
        lookup_attempts=lookup_attempts,
    )
