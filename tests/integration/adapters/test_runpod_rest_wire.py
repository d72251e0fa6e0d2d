"""The REST v2 wire: request shape, what only REST v2 does (409 then DELETE, the account read
through GraphQL while it lives, pacing) and the quota tracker."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from decimal import Decimal

import pytest

from adapters.runpod import RunPodCompute, make_compute
from adapters.runpod.ratelimit import RateLimitTracker, parse_limits, parse_policy
from adapters.runpod.rest_wire import UNKNOWN_ACCOUNT_ID
from application.errors import InvalidCredentials, ProviderError, ProviderUnavailable
from runpod_sandbox import Sandbox
from tests.integration.adapters.contract_compute import EU_DC, EU_VOLUME, RTX_4090, spec


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(startup_seconds=0.05) as sb:
        yield sb


@pytest.fixture
def key(sandbox: Sandbox) -> str:
    return str(sandbox.credentials()["api_key"])


@pytest.fixture
def rest(sandbox: Sandbox) -> RunPodCompute:
    return make_compute(
        "rest", sandbox.base_url, timeout_s=5, sleep=sandbox.advance_clock, jitter=lambda: 0.5
    )


def test_launch_sends_one_gpu_type_a_cuda_floor_the_network_mount_and_the_run_marker(
    rest: RunPodCompute, sandbox: Sandbox, key: str
) -> None:
    s = spec("tensorant-run-wire", env={"TENSORANT_RUN_ID": "r-1"})
    pod = rest.launch_pod(key, s)
    made = sandbox.model.pods[pod.id]
    assert (made.gpu_type_id, made.gpu_count, made.datacenter_id) == (RTX_4090, 1, EU_DC)
    assert (made.network_volume_id, made.volume_mount_path) == (EU_VOLUME, "/workspace")
    assert (made.min_cuda_version, made.allowed_cuda_versions) == ("13.0", [])
    assert made.env == {"TENSORANT_RUN_ID": "r-1"}


def test_persistent_5xx_and_non_json_answers_cost_one_request_per_attempt(
    rest: RunPodCompute, sandbox: Sandbox, key: str
) -> None:
    sandbox.set_faults(error_rate=1.0)
    with pytest.raises(ProviderUnavailable):
        rest.list_pods(key)
    sandbox.set_faults(non_json_rate=1.0)
    with pytest.raises(ProviderUnavailable, match="non-JSON"):
        rest.get_pod(key, "abc")
    assert rest.billing.http.requests == 2 * rest.retry.max_attempts


def test_an_edge_429_is_waited_out_and_the_read_succeeds(
    rest: RunPodCompute, sandbox: Sandbox, key: str
) -> None:
    sandbox.set_faults(rate_limit_rate=0.5, seed=3)
    for _ in range(6):
        assert len(rest.list_volumes(key)) == 3
    assert rest.billing.http.throttled > 0


def test_a_pod_in_a_status_without_actions_is_deleted_instead_of_terminated(
    rest: RunPodCompute, sandbox: Sandbox, key: str
) -> None:
    pod = rest.launch_pod(key, spec())
    with sandbox.model.lock:
        sandbox.model.pods[pod.id].desired_status = "PAUSED_BY_MARTIANS"
    with pytest.raises(ProviderError, match="in its status"):
        rest.stop_pod(key, pod.id)
    rest.terminate_pod(key, pod.id)
    assert rest.get_pod(key, pod.id) is None


def test_the_account_check_uses_graphql_myself_while_it_lives_and_degrades_after(
    rest: RunPodCompute, sandbox: Sandbox, key: str
) -> None:
    rest.launch_pod(key, spec())
    live = rest.check_account(key)
    assert (live.id, live.balance) == (sandbox.credentials()["account_id"], Decimal("250.00"))
    assert live.spend_per_hour == Decimal("0.6")  # the running Pod's cost
    sandbox.set_faults(graphql_retired=True)
    retired = rest.check_account(key)
    assert retired.id == UNKNOWN_ACCOUNT_ID
    assert retired.balance is None  # unknown: RunPod's own 402 decides at create
    assert retired.spend_per_hour == Decimal("0.6")
    with pytest.raises(InvalidCredentials):
        rest.check_account("rpa_NOPE")


def test_the_graphql_wire_says_so_when_graphql_is_retired(sandbox: Sandbox, key: str) -> None:
    sandbox.set_faults(graphql_retired=True)
    graphql = make_compute("graphql", sandbox.base_url, timeout_s=5, sleep=sandbox.advance_clock)
    with pytest.raises(ProviderError, match="TENSORANT_RUNPOD_API=rest"):
        graphql.list_pods(key)


def test_the_tracker_paces_before_the_quota_is_gone_and_honours_retry_after() -> None:
    clock = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        clock[0] += s

    t = RateLimitTracker(now=lambda: clock[0], sleep=sleep, low_fraction=0.2)
    policy = '"minute";q=10;w=60, "hour";q=100;w=3600'
    t.observe(
        "k", 200, {"RateLimit": '"minute";r=5;t=40, "hour";r=90;t=1000', "RateLimit-Policy": policy}
    )
    t.before_call("k")
    assert slept == []  # plenty left
    t.observe(
        "k", 200, {"RateLimit": '"minute";r=2;t=30, "hour";r=88;t=1000', "RateLimit-Policy": policy}
    )
    t.before_call("k")
    assert slept == [10.0]  # 30 s left for 2 calls: spread over 3 gaps
    t.observe(
        "k",
        429,
        {"Retry-After": "12", "RateLimit": '"minute";r=0;t=12', "RateLimit-Policy": policy},
    )
    t.before_call("k")
    assert slept[-1] == 12.0
    assert parse_limits('"day";r=49500;t=45012') == {"day": (49500, 45012)}
    assert parse_policy(policy)["hour"] == (100, 3600)


def test_a_wait_longer_than_the_bound_fails_fast_without_a_request() -> None:
    t = RateLimitTracker(now=lambda: 0.0, sleep=lambda s: None, max_wait_s=60)
    t.observe("k", 429, {"Retry-After": "3000"})
    with pytest.raises(ProviderUnavailable, match="3000 s"):
        t.before_call("k")


def test_open_pod_log_streams_never_hold_up_the_other_calls(
    rest: RunPodCompute, sandbox: Sandbox, key: str
) -> None:
    """A worker following more Pods than an HTTP pool holds (httpx: 100) still reads a Pod at
    once: the streams have a pool of their own (bench/report_latency.py found the stall)."""
    pod = rest.launch_pod(key, spec("tensorant-run-streams", env={"TENSORANT_RUN_ID": "r-s"}))
    opened = threading.Semaphore(0)

    def follow() -> None:
        with contextlib.suppress(ProviderError):
            for _ in rest.pod_logs(key, pod.id, tail=0):
                pass
        opened.release()

    http = rest.billing.http
    before = http.requests
    for _ in range(110):
        threading.Thread(target=follow, daemon=True).start()
    deadline = time.monotonic() + 20
    while http.requests - before < 110:  # every stream was sent
        assert time.monotonic() < deadline, http.requests - before
        time.sleep(0.05)
    time.sleep(0.5)  # fixed-sleep-ok: the streams are open while a read is timed
    started = time.monotonic()
    assert rest.get_pod(key, pod.id) is not None
    assert time.monotonic() - started < 2.0
