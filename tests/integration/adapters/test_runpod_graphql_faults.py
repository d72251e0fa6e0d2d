"""The GraphQL adapter under the sandbox's fault injection, over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest

from adapters.runpod_graphql import RunPodGraphQLCompute
from application.errors import (
    InsufficientPermissions,
    InvalidCredentials,
    PodGone,
    ProviderError,
    ProviderUnavailable,
)
from runpod_sandbox import Sandbox
from tests.integration.adapters.contract_compute import spec


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(startup_seconds=0.1) as sb:
        yield sb


@pytest.fixture
def slept() -> list[float]:
    return []


@pytest.fixture
def adapter(sandbox: Sandbox, slept: list[float]) -> RunPodGraphQLCompute:
    def sleep(seconds: float) -> None:
        slept.append(seconds)
        sandbox.advance_clock(seconds)

    return RunPodGraphQLCompute(sandbox.base_url, sleep=sleep, jitter=lambda: 1.0, timeout_s=5)


@pytest.fixture
def key(sandbox: Sandbox) -> str:
    return str(sandbox.credentials()["api_key"])


def named(sandbox: Sandbox, name: str) -> list[str]:
    return [p.id for p in sandbox.model.all_pods() if p.name == name]


def test_html_502_pages_are_retried_with_backoff_then_reported_unavailable(
    adapter: RunPodGraphQLCompute, sandbox: Sandbox, key: str, slept: list[float]
) -> None:
    sandbox.set_faults(non_json_rate=1.0)
    with pytest.raises(ProviderUnavailable, match="non-JSON") as caught:
        adapter.list_volumes(key)
    assert slept == [0.2, 0.4, 0.8]
    assert key not in str(caught.value)


def test_rate_limited_reads_wait_at_least_the_retry_after(
    adapter: RunPodGraphQLCompute, sandbox: Sandbox, key: str, slept: list[float]
) -> None:
    sandbox.set_faults(rate_limit_rate=1.0)
    with pytest.raises(ProviderUnavailable):
        adapter.check_account(key)
    assert slept == [1.0, 1.0, 1.0]  # Retry-After: 1 outweighs the 0.2 s and 0.4 s backoff


def test_something_went_wrong_on_every_call_creates_nothing_and_reports_unavailable(
    adapter: RunPodGraphQLCompute, sandbox: Sandbox, key: str
) -> None:
    sandbox.set_faults(error_rate=1.0)
    with pytest.raises(ProviderUnavailable):
        adapter.launch_pod(key, spec())
    sandbox.set_faults()
    assert named(sandbox, spec().name) == []


def test_a_create_answered_with_500_after_the_pod_was_made_leaves_exactly_one_pod_found_by_name(
    adapter: RunPodGraphQLCompute, sandbox: Sandbox, key: str
) -> None:
    # set through the admin HTTP knob, as the demo does
    knob = httpx.post(f"{sandbox.base_url}/_sandbox/faults", json={"create_then_500": 1})
    knob.raise_for_status()
    pod = adapter.launch_pod(key, spec())
    assert named(sandbox, spec().name) == [pod.id]
    found = adapter.find_pod_by_name(key, spec().name)
    assert found is not None
    assert found.id == pod.id


def test_creates_that_always_500_after_creating_still_make_one_pod_despite_listing_lag(
    adapter: RunPodGraphQLCompute, sandbox: Sandbox, key: str, slept: list[float]
) -> None:
    sandbox.set_faults(create_then_500=-1, list_lag_seconds=1.0)
    pod = adapter.launch_pod(key, spec())
    assert named(sandbox, spec().name) == [pod.id]
    assert sum(slept) >= 1.0  # it waited for the listing instead of creating again
    assert adapter.launch_pod(key, spec()).id == pod.id
    assert named(sandbox, spec().name) == [pod.id]


def test_a_read_only_key_cannot_stop_or_terminate(
    adapter: RunPodGraphQLCompute, sandbox: Sandbox, key: str
) -> None:
    pod = adapter.launch_pod(key, spec())
    ro = str(sandbox.credentials()["read_only_api_key"])
    for call in (adapter.stop_pod, adapter.terminate_pod):
        with pytest.raises(InsufficientPermissions, match="read-only key") as caught:
            call(ro, pod.id)
        assert ro not in str(caught.value)
    assert adapter.get_pod(key, pod.id) is not None


def test_an_invalid_key_is_invalid_credentials_on_graphql_and_on_billing(
    adapter: RunPodGraphQLCompute, sandbox: Sandbox
) -> None:
    bad = "rpa_THISKEYISWRONG00000000000000000000000000"
    now = sandbox.model.clock.now()
    for call in (
        lambda: adapter.list_pods(bad),
        lambda: adapter.billing_pods(bad, now - timedelta(hours=1), now),
    ):
        with pytest.raises(InvalidCredentials) as caught:
            call()
        assert bad not in str(caught.value)
        assert bad[-12:] not in str(caught.value)


def test_a_terminate_acknowledged_but_not_carried_out_is_still_visible_to_get_pod(
    adapter: RunPodGraphQLCompute, sandbox: Sandbox, key: str
) -> None:
    pod = adapter.launch_pod(key, spec())
    sandbox.set_faults(terminate_lies=1)
    adapter.terminate_pod(key, pod.id)
    assert adapter.get_pod(key, pod.id) is not None  # callers confirm by reading, never assume
    adapter.terminate_pod(key, pod.id)
    assert adapter.get_pod(key, pod.id) is None


def test_a_pod_that_vanished_reads_as_none_and_cannot_be_stopped(
    adapter: RunPodGraphQLCompute, sandbox: Sandbox, key: str
) -> None:
    pod = adapter.launch_pod(key, spec())
    sandbox.set_faults(vanish_pods=[pod.id])
    assert adapter.get_pod(key, pod.id) is None
    with pytest.raises(PodGone):
        adapter.stop_pod(key, pod.id)
    adapter.terminate_pod(key, pod.id)  # already gone: nothing to do


def test_billing_retries_transient_rest_errors(
    adapter: RunPodGraphQLCompute, sandbox: Sandbox, key: str, slept: list[float]
) -> None:
    sandbox.set_faults(error_rate=1.0)
    now = sandbox.model.clock.now()
    with pytest.raises(ProviderUnavailable):
        adapter.billing_volumes(key, now - timedelta(hours=2), now)
    assert len(slept) == 3
    sandbox.set_faults()
    sandbox.advance_clock(2 * 3600)  # network volumes book each hour when it completes
    assert adapter.billing_volumes(key, now - timedelta(hours=1), now + timedelta(hours=3))


def test_every_sandbox_failure_keeps_the_key_out_of_error_texts(
    adapter: RunPodGraphQLCompute, sandbox: Sandbox, key: str
) -> None:
    faults: list[dict[str, Any]] = [
        {"non_json_rate": 1.0},
        {"rate_limit_rate": 1.0},
        {"error_rate": 1.0},
        {"capacity_gpu_types": [spec().gpu_type_id]},
    ]
    for fault in faults:
        sandbox.set_faults(fault)
        with pytest.raises(ProviderError) as caught:
            adapter.launch_pod(key, spec())
        assert key not in str(caught.value)
        assert key not in repr(caught.value.extra)
