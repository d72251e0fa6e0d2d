"""One RunPod account, two APIs: a Pod launched through one adapter is managed through the other."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from adapters.runpod import make_compute
from application.ports import POD_STOPPED
from runpod_sandbox import Sandbox
from tests.integration.adapters.contract_compute import spec


@pytest.fixture
def sandbox() -> Iterator[Sandbox]:
    with Sandbox(startup_seconds=0.1) as sb:
        yield sb


@pytest.mark.parametrize(("first", "second"), [("graphql", "rest"), ("rest", "graphql")])
def test_a_pod_launched_through_one_api_is_stopped_resumed_and_terminated_through_the_other(
    sandbox: Sandbox, first: str, second: str
) -> None:
    key = str(sandbox.credentials()["api_key"])
    launcher = make_compute(first, sandbox.base_url, sleep=sandbox.advance_clock, timeout_s=5)
    other = make_compute(second, sandbox.base_url, sleep=sandbox.advance_clock, timeout_s=5)
    name = f"tensorant-run-mixed-{first}"
    launched = launcher.launch_pod(key, spec(name))

    seen = other.find_pod_by_name(key, name)
    assert seen is not None
    assert (seen.id, seen.gpu_type_id, seen.network_volume_id) == (
        launched.id,
        launched.gpu_type_id,
        launched.network_volume_id,
    )
    assert other.launch_pod(key, spec(name)).id == launched.id  # no duplicate across APIs

    other.stop_pod(key, launched.id)
    stopped = launcher.get_pod(key, launched.id)
    assert stopped is not None
    assert stopped.status == POD_STOPPED
    assert other.resume_pod(key, launched.id, 1).id == launched.id

    other.terminate_pod(key, launched.id)
    assert launcher.get_pod(key, launched.id) is None
    assert other.get_pod(key, launched.id) is None
    assert [p.desired_status for p in sandbox.model.all_pods()] == ["TERMINATED"]
