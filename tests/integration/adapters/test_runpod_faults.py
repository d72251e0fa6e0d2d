"""RunPodCompute under the sandbox's fault injection, over real HTTP, once per wire."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from adapters.runpod import APIS, RunPodCompute, make_compute
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


@pytest.fixture(params=APIS)
def adapter(request: pytest.FixtureRequest, sandbox: Sandbox, slept: list[float]) -> RunPodCompute:
    def sleep(seconds: float) -> None:
        slept.append(seconds)
        sandbox.advance_clock(seconds)

    return make_compute(
        request.param, sandbox.base_url, sleep=sleep, jitter=lambda: 1.0, timeout_s=5
    )


@pytest.fixture
def key(sandbox: Sandbox) -> str:
    return str(sandbox.credentials()["api_key"])


def named(sandbox: Sandbox, name: str) -> list[str]:
    return [p.id for p in sandbox.model.all_pods() if p.name == name]


def test_html_502_pages_are_retried_with_backoff_then_reported_unavailable(
    adapter: RunPodCompute, sandbox: Sandbox, key: str, slept: list[float]
) -> None:
    sandbox.set_faults(non_json_rate=1.0)
    with pytest.raises(ProviderUnavailable, match="non-JSON") as caught:
        adapter.list_volumes(key)
    assert slept == [0.2, 0.4, 0.8]
    assert key not in str(caught.value)


def test_something_went_wrong_on_every_call_creates_nothing_and_reports_unavailable(
    adapter: RunPodCompute, sandbox: Sandbox, key: str
) -> None:
    sandbox.set_faults(error_rate=1.0)
    with pytest.raises(ProviderUnavailable):
        adapter.launch_pod(key, spec())
    sandbox.set_faults()
    assert named(sandbox, spec().name) == []


def test_creates_that_always_500_after_creating_still_make_one_pod_despite_listing_lag(
    adapter: RunPodCompute, sandbox: Sandbox, key: str, slept: list[float]
) -> None:
    sandbox.set_faults(create_then_500=-1, list_lag_seconds=1.0)
    pod = adapter.launch_pod(key, spec())
    assert named(sandbox, spec().name) == [pod.id]
    assert sum(slept) >= 1.0  # it waited for the listing instead of creating again
    assert adapter.launch_pod(key, spec()).id == pod.id
    assert named(sandbox, spec().name) == [pod.id]


def test_a_create_answered_500_while_pod_listings_fail_is_not_repeated_blindly(
    adapter: RunPodCompute, sandbox: Sandbox, key: str
) -> None:
    """R5: looking again after the doubtful create cannot read the listing, so the launch fails
    instead of creating again; the next launch looks the name up first and adopts the Pod."""
    sandbox.set_faults(hold_creates=1)
    outcome: dict[str, Any] = {}

    def launch() -> None:
        try:
            outcome["pod"] = adapter.launch_pod(key, spec())
        except ProviderError as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=launch)
    thread.start()
    deadline = time.monotonic() + 10
    while not sandbox.model.held_creates() and time.monotonic() < deadline:
        time.sleep(0.01)
    sandbox.set_faults(list_pods_error_rate=1.0)
    sandbox.model.release_held(fail=True)  # the held create answers 500
    thread.join(30)
    assert isinstance(outcome.get("error"), ProviderUnavailable), outcome
    assert "looked up by name" in str(outcome["error"])
    made = named(sandbox, spec().name)
    assert len(made) == 1
    sandbox.set_faults()
    assert adapter.launch_pod(key, spec()).id == made[0]
    assert named(sandbox, spec().name) == made


def test_a_read_only_key_cannot_stop_or_terminate(
    adapter: RunPodCompute, sandbox: Sandbox, key: str
) -> None:
    pod = adapter.launch_pod(key, spec())
    ro = str(sandbox.credentials()["read_only_api_key"])
    for call in (adapter.stop_pod, adapter.terminate_pod):
        with pytest.raises(InsufficientPermissions, match="read-only key") as caught:
            call(ro, pod.id)
        assert ro not in str(caught.value)
    assert adapter.get_pod(key, pod.id) is not None


def test_an_empty_or_invalid_key_is_invalid_credentials_on_pods_and_on_billing(
    adapter: RunPodCompute, sandbox: Sandbox
) -> None:
    bad = "rpa_THISKEYISWRONG00000000000000000000000000"
    now = sandbox.model.clock.now()
    for call in (
        lambda: adapter.list_pods(""),
        lambda: adapter.list_volumes(bad),
        lambda: adapter.billing_pods(bad, now - timedelta(hours=1), now),
    ):
        with pytest.raises(InvalidCredentials) as caught:
            call()
        assert bad not in str(caught.value)
        assert bad[-12:] not in str(caught.value)


def test_a_terminate_acknowledged_but_not_carried_out_is_still_visible_to_get_pod(
    adapter: RunPodCompute, sandbox: Sandbox, key: str
) -> None:
    pod = adapter.launch_pod(key, spec())
    sandbox.set_faults(terminate_lies=1)
    adapter.terminate_pod(key, pod.id)
    assert adapter.get_pod(key, pod.id) is not None  # callers confirm by reading, never assume
    adapter.terminate_pod(key, pod.id)
    assert adapter.get_pod(key, pod.id) is None


def test_a_pod_that_vanished_reads_as_none_and_cannot_be_stopped(
    adapter: RunPodCompute, sandbox: Sandbox, key: str
) -> None:
    pod = adapter.launch_pod(key, spec())
    sandbox.set_faults(vanish_pods=[pod.id])
    assert adapter.get_pod(key, pod.id) is None
    with pytest.raises(PodGone):
        adapter.stop_pod(key, pod.id)
    adapter.terminate_pod(key, pod.id)  # already gone: nothing to do


def test_every_sandbox_failure_keeps_the_key_out_of_error_texts(
    adapter: RunPodCompute, sandbox: Sandbox, key: str
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


def test_billing_retries_transient_errors_then_reads(
    sandbox: Sandbox, key: str, slept: list[float]
) -> None:
    """Billing is one REST v2 client whichever wire carries the Pods: tested once."""
    adapter = make_compute("graphql", sandbox.base_url, sleep=slept.append, timeout_s=5)
    sandbox.set_faults(error_rate=1.0)
    now = sandbox.model.clock.now()
    with pytest.raises(ProviderUnavailable):
        adapter.billing_volumes(key, now - timedelta(hours=2), now)
    assert len(slept) == 3
    sandbox.set_faults()
    sandbox.advance_clock(2 * 3600)  # network volumes book each hour when it completes
    assert adapter.billing_volumes(key, now - timedelta(hours=1), now + timedelta(hours=3))
