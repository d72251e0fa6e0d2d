"""The GraphQL wire's format and error mapping, and RunPodCompute's retry, lookup and re-read
rules seen through it, against a scripted stub (tests.integration.adapters.runpod_stub)."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
import runpod
from runpod.api.graphql import run_graphql_query

from adapters.retry import RetryPolicy
from adapters.runpod import RunPodCompute, make_compute
from adapters.runpod.graphql_wire import GraphQLWire, deploy_mutation
from adapters.runpod.http import RunPodHttp
from adapters.runpod.mapping import money, pod_status
from adapters.runpod.ratelimit import RateLimitTracker
from application.errors import (
    CapacityUnavailable,
    InsufficientBalance,
    InsufficientPermissions,
    InvalidCredentials,
    PodGone,
    ProviderError,
    ProviderUnavailable,
)
from application.ports import (
    POD_ERROR,
    POD_RUNNING,
    POD_STARTING,
    POD_STOPPED,
    POD_TERMINATED,
    POD_UNKNOWN,
    PodSpec,
)
from tests.integration.adapters.runpod_stub import (
    HTML_502,
    KEY,
    Answer,
    StubRunPod,
    assert_no_key,
    data,
    gql_error,
    raw_pod,
)


@pytest.fixture
def adapter(stub: StubRunPod, slept: list[float]) -> RunPodCompute:
    return make_compute(
        "graphql", stub.base_url, sleep=slept.append, jitter=lambda: 1.0, timeout_s=2
    )


def spec() -> PodSpec:
    return PodSpec(
        name="run-1",
        image="tensorant/trainer:1",
        gpu_type_id="NVIDIA GeForce RTX 4090",
        gpu_count=1,
        env={"K": "v"},
        datacenter_id="EU-RO-1",
        network_volume_id="nv1",
    )


# ------------------------------------------------------------------ wire format and base URL


def test_requests_carry_the_same_url_headers_and_body_as_the_sdks_run_graphql_query(
    stub: StubRunPod, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub.on("myself", data({"myself": {"id": "u1", "clientBalance": 1.5}}))
    wire = GraphQLWire(RunPodHttp(stub.base_url, 2, RateLimitTracker()))
    wire.post("query myself { myself { id clientBalance } }", KEY)
    monkeypatch.setenv("RUNPOD_API_BASE_URL", stub.base_url)
    run_graphql_query("query myself { myself { id clientBalance } }", api_key=KEY)
    ours, sdks = stub.requests
    assert ours["path"] == sdks["path"] == "/graphql"
    assert ours["body"] == sdks["body"]
    for header in ("Content-Type", "User-Agent", "Authorization"):
        assert ours["headers"][header] == sdks["headers"][header]
    assert ours["headers"]["Authorization"] == f"Bearer {KEY}"


def test_an_explicit_base_url_wins_over_the_environment_and_nothing_global_is_set(
    stub: StubRunPod, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNPOD_API_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setattr(runpod, "api_key", None)
    stub.on("myself", data({"myself": {"id": "u1", "clientBalance": 2, "currentSpendPerHr": 0}}))
    adapter = make_compute("graphql", stub.base_url + "/")
    assert adapter.check_account(KEY).id == "u1"
    assert os.environ["RUNPOD_API_BASE_URL"] == "http://127.0.0.1:9"
    assert runpod.api_key is None


def test_without_a_base_url_the_adapter_follows_runpod_api_base_url_like_the_sdk(
    stub: StubRunPod, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RUNPOD_API_BASE_URL", stub.base_url)
    stub.on("myself", data({"myself": {"id": "u2", "clientBalance": 0, "currentSpendPerHr": 0}}))
    assert (
        make_compute(
            "graphql",
        )
        .check_account(KEY)
        .id
        == "u2"
    )


def test_pod_names_and_env_values_with_quotes_cannot_break_the_mutation(
    stub: StubRunPod, adapter: RunPodCompute
) -> None:
    stub.on("myPods", data({"myself": {"pods": []}}))
    stub.on("podFindAndDeployOnDemand", data({"podFindAndDeployOnDemand": {"id": "pod1"}}))
    stub.on("query pod", data({"pod": raw_pod()}))
    evil = PodSpec(
        name='run"}) { id } }',
        image="img",
        gpu_type_id="G",
        gpu_count=1,
        env={"A": 'x" } ], dockerArgs: "rm -rf /'},
    )
    adapter.launch_pod(KEY, evil)
    sent = next(
        json.loads(r["body"])["query"]
        for r in stub.requests
        if b"podFindAndDeployOnDemand" in r["body"]
    )
    assert 'name: "run\\"}) { id } }"' in sent
    assert 'value: "x\\" } ], dockerArgs: \\"rm -rf /"' in sent
    assert "cloudType: SECURE" in sent
    assert 'minCudaVersion: "13.0"' in sent and "allowedCudaVersions" not in sent
    assert 'volumeMountPath: "/workspace"' in sent


def test_the_create_is_the_sdks_mutation_plus_min_cuda_version_alone() -> None:
    """R5: CUDA 13 or newer (13.1 hosts too), not exactly 13.0; the SDK 1.12 builder knows only
    the exact-match set, so `minCudaVersion` is added inside its input object, nothing else."""
    from runpod.api.mutations.pods import generate_pod_deployment_mutation

    ours = deploy_mutation(spec())
    assert ours.count('minCudaVersion: "13.0"') == 1
    sdk = generate_pod_deployment_mutation(
        name="run-1",
        image_name="tensorant/trainer:1",
        gpu_type_id="NVIDIA GeForce RTX 4090",
        cloud_type="SECURE",
        data_center_id="EU-RO-1",
        gpu_count=1,
        volume_in_gb=0,
        container_disk_in_gb=20,
        volume_mount_path="/workspace",
        env={"K": "v"},
        network_volume_id="nv1",
    )
    assert ours.replace(', minCudaVersion: "13.0"', "") == sdk
    exact = deploy_mutation(
        PodSpec("n", "i", "G", 1, {}, min_cuda_version=None, allowed_cuda_versions=("12.8",))
    )
    assert 'allowedCudaVersions: ["12.8"]' in exact and "minCudaVersion" not in exact


# ------------------------------------------------------------------ error mapping


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (Answer(401, {"errors": [{"message": "Unauthorized"}]}), InvalidCredentials),
        (gql_error("Unauthorized"), InsufficientPermissions),
        (
            gql_error(
                "There are no longer any instances available with the requested specifications. "
                "Please refresh and try again."
            ),
            CapacityUnavailable,
        ),
        (gql_error("Your account balance is too low to deploy this pod."), InsufficientBalance),
        (gql_error("Insufficient credit to deploy this pod"), InsufficientBalance),
        (gql_error("Field 'bogus' is not defined", 400), ProviderError),
    ],
)
def test_definite_refusals_map_to_our_errors_and_are_not_retried(
    stub: StubRunPod,
    adapter: RunPodCompute,
    slept: list[float],
    answer: Answer,
    error: type[ProviderError],
) -> None:
    stub.on("myPods", data({"myself": {"pods": []}}))
    stub.on("podFindAndDeployOnDemand", answer)
    with pytest.raises(error) as caught:
        adapter.launch_pod(KEY, spec())
    assert type(caught.value) is error
    assert stub.count("podFindAndDeployOnDemand") == 1
    assert_no_key(caught.value)


def test_a_read_only_key_is_told_it_cannot_launch_or_clean_up(
    stub: StubRunPod, adapter: RunPodCompute
) -> None:
    stub.on("podTerminate", gql_error("Unauthorized"))
    with pytest.raises(InsufficientPermissions, match="read-only key: it cannot launch or clean"):
        adapter.terminate_pod(KEY, "pod1")


@pytest.mark.parametrize(
    "answer",
    [
        Answer(502, HTML_502),
        Answer(429, HTML_502, {"Retry-After": "1"}),
        Answer(429, {"errors": [{"message": "Too many requests"}]}),
        Answer(500, {"errors": [{"message": "Something went wrong. Please try again later."}]}),
        gql_error("Something went wrong. Please try again later or contact support."),
        Answer(503, {"data": None}),
        Answer(200, {"data": None}),
    ],
)
def test_transient_failures_on_reads_are_retried_then_reported_unavailable(
    stub: StubRunPod, adapter: RunPodCompute, slept: list[float], answer: Answer
) -> None:
    stub.on("myself", answer)
    with pytest.raises(ProviderUnavailable) as caught:
        adapter.check_account(KEY)
    assert stub.count("myself") == 4
    assert len(slept) == 3
    assert_no_key(caught.value)


def test_a_read_that_recovers_after_transient_failures_returns_the_answer(
    stub: StubRunPod, adapter: RunPodCompute
) -> None:
    stub.on(
        "networkVolumes",
        Answer(502, HTML_502),
        gql_error("Something went wrong."),
        data(
            {
                "myself": {
                    "networkVolumes": [
                        {"id": "nv1", "name": "a", "size": 10, "dataCenterId": "EU-RO-1"}
                    ]
                }
            }
        ),
    )
    assert [v.id for v in adapter.list_volumes(KEY)] == ["nv1"]


def test_a_timeout_is_provider_unavailable(stub: StubRunPod, slept: list[float]) -> None:
    stub.on("myself", Answer(200, {"data": {"myself": {"id": "u"}}}, delay_s=1.0))
    adapter = make_compute(
        "graphql", stub.base_url, sleep=slept.append, timeout_s=0.2, max_attempts=2
    )
    with pytest.raises(ProviderUnavailable, match="did not answer"):
        adapter.check_account(KEY)


def test_a_refused_connection_is_provider_unavailable(slept: list[float]) -> None:
    adapter = make_compute("graphql", "http://127.0.0.1:9", sleep=slept.append, max_attempts=2)
    with pytest.raises(ProviderUnavailable, match="could not be reached"):
        adapter.list_pods(KEY)
    assert len(slept) == 1


def test_no_error_text_contains_the_key_even_when_runpod_echoes_it(
    stub: StubRunPod, adapter: RunPodCompute, caplog: pytest.LogCaptureFixture
) -> None:
    stub.on("myPods", Answer(500, {"errors": [{"message": f"boom for {KEY}"}]}))
    stub.on("myself", gql_error(f"key {KEY} is not allowed; key ...{KEY[-12:]}"))
    with pytest.raises(ProviderError) as first:
        adapter.check_account(KEY)
    with pytest.raises(ProviderUnavailable) as second:
        adapter.list_pods(KEY)
    for caught in (first, second):
        assert_no_key(caught.value)
    assert KEY not in caplog.text


def test_an_empty_key_is_invalid_without_any_request(
    stub: StubRunPod, adapter: RunPodCompute
) -> None:
    with pytest.raises(InvalidCredentials):
        adapter.check_account("")
    assert stub.requests == []


# ------------------------------------------------------------------ retry policy


def test_backoff_doubles_from_the_base_delay_up_to_the_cap() -> None:
    policy = RetryPolicy(max_attempts=8, base_delay_s=0.2, max_delay_s=1.0, jitter=lambda: 1.0)
    assert [policy.delay(n) for n in range(5)] == [0.2, 0.4, 0.8, 1.0, 1.0]


def test_full_jitter_draws_each_wait_between_zero_and_the_cap() -> None:
    low = RetryPolicy(base_delay_s=0.2, max_delay_s=3.0, jitter=lambda: 0.0)
    half = RetryPolicy(base_delay_s=0.2, max_delay_s=3.0, jitter=lambda: 0.5)
    assert low.delay(3) == 0.0
    assert half.delay(3) == pytest.approx(0.8)


def test_retry_after_raises_the_wait_but_never_past_the_cap() -> None:
    policy = RetryPolicy(base_delay_s=0.2, max_delay_s=3.0, jitter=lambda: 0.0)
    assert policy.delay(0, retry_after_s=1.0) == 1.0
    assert policy.delay(0, retry_after_s=60.0) == 3.0


def test_reads_wait_with_exponential_backoff_between_attempts(
    stub: StubRunPod, adapter: RunPodCompute, slept: list[float]
) -> None:
    stub.on("myself", Answer(502, HTML_502))
    with pytest.raises(ProviderUnavailable):
        adapter.check_account(KEY)
    assert slept == [0.2, 0.4, 0.8]


def test_a_429_retry_after_is_honoured(stub: StubRunPod, slept: list[float]) -> None:
    stub.on(
        "myself",
        Answer(429, HTML_502, {"Retry-After": "2"}),
        data({"myself": {"id": "u", "clientBalance": 1, "currentSpendPerHr": 0}}),
    )
    adapter = make_compute("graphql", stub.base_url, sleep=slept.append, jitter=lambda: 0.0)
    assert adapter.check_account(KEY).id == "u"
    assert slept == [2.0]


# ------------------------------------------------------------------ launch


def test_launch_returns_an_existing_pod_of_that_name_without_creating(
    stub: StubRunPod, adapter: RunPodCompute
) -> None:
    stub.on("myPods", data({"myself": {"pods": [raw_pod()]}}))
    assert adapter.launch_pod(KEY, spec()).id == "pod1"
    assert stub.count("podFindAndDeployOnDemand") == 0


def test_of_several_pods_with_one_name_the_first_listed_is_used_and_logged_loudly(
    stub: StubRunPod, adapter: RunPodCompute, caplog: pytest.LogCaptureFixture
) -> None:
    stub.on("myPods", data({"myself": {"pods": [raw_pod(id="old"), raw_pod(id="new")]}}))
    assert adapter.launch_pod(KEY, spec()).id == "old"
    assert "DUPLICATE PODS" in caplog.text
    assert "new" in caplog.text


def test_a_create_that_timed_out_but_happened_is_found_by_name_and_not_repeated(
    stub: StubRunPod, adapter: RunPodCompute, slept: list[float]
) -> None:
    # the listing lags: empty before the create, still empty once after, then the Pod appears
    stub.on(
        "myPods",
        data({"myself": {"pods": []}}),
        data({"myself": {"pods": []}}),
        data({"myself": {"pods": []}}),
        data({"myself": {"pods": [raw_pod()]}}),
    )
    stub.on("podFindAndDeployOnDemand", Answer(504, HTML_502))
    pod = adapter.launch_pod(KEY, spec())
    assert pod.id == "pod1"
    assert stub.count("podFindAndDeployOnDemand") == 1
    assert slept == [0.4, 0.8]  # the lookup waits, not jittered


def test_a_failed_create_whose_lookups_fail_is_not_repeated_but_reported_unavailable(
    stub: StubRunPod, adapter: RunPodCompute
) -> None:
    """The listing could not be read after a doubtful create: creating again could make a
    second Pod, so the launch fails and its next attempt starts by looking up the name (R5)."""
    stub.on("myPods", data({"myself": {"pods": []}}), Answer(502, HTML_502))
    stub.on("podFindAndDeployOnDemand", gql_error("Something went wrong.", 500))
    with pytest.raises(ProviderUnavailable, match="looked up by name before any new create"):
        adapter.launch_pod(KEY, spec())
    assert stub.count("podFindAndDeployOnDemand") == 1
    assert stub.count("myPods") == 1 + 4  # before, then four looks


def test_a_failed_create_is_retried_only_after_looking_for_the_pod(
    stub: StubRunPod, adapter: RunPodCompute
) -> None:
    stub.on("myPods", data({"myself": {"pods": []}}))
    stub.on(
        "podFindAndDeployOnDemand",
        Answer(502, HTML_502),
        data({"podFindAndDeployOnDemand": {"id": "pod1"}}),
    )
    stub.on("query pod", data({"pod": raw_pod()}))
    pod = adapter.launch_pod(KEY, spec())
    assert (pod.id, pod.cost_per_hour) == ("pod1", Decimal("0.34"))
    kinds = [
        (
            "create"
            if b"podFindAndDeploy" in r["body"]
            else "list"
            if b"myPods" in r["body"]
            else "get"
        )
        for r in stub.requests
    ]
    assert kinds == ["list", "create", "list", "list", "list", "list", "create", "get"]


def test_a_create_that_keeps_failing_gives_up_unavailable_after_max_attempts(
    stub: StubRunPod, adapter: RunPodCompute
) -> None:
    stub.on("myPods", data({"myself": {"pods": []}}))
    stub.on("podFindAndDeployOnDemand", gql_error("Something went wrong.", 500))
    with pytest.raises(ProviderUnavailable):
        adapter.launch_pod(KEY, spec())
    assert stub.count("podFindAndDeployOnDemand") == 4


def test_the_launched_pod_is_read_back_for_its_price_and_placement(
    stub: StubRunPod, adapter: RunPodCompute
) -> None:
    stub.on("myPods", data({"myself": {"pods": []}}))
    stub.on(
        "podFindAndDeployOnDemand",
        data(
            {
                "podFindAndDeployOnDemand": {
                    "id": "pod1",
                    "imageName": "img",
                    "env": [],
                    "machineId": "m",
                    "machine": {"podHostId": "pod1-abcdef12"},
                }
            }
        ),
    )
    stub.on("query pod", data({"pod": raw_pod(runtime=False)}))
    pod = adapter.launch_pod(KEY, spec())
    assert pod.cost_per_hour == Decimal("0.34")
    assert (pod.status, pod.datacenter_id, pod.pod_host_id) == (
        POD_STARTING,
        "EU-RO-1",
        "pod1-abcdef12",
    )


# ------------------------------------------------------------------ lifecycle


def test_get_pod_of_a_pod_runpod_no_longer_knows_is_none(
    stub: StubRunPod, adapter: RunPodCompute
) -> None:
    stub.on("query pod", data({"pod": None}))
    assert adapter.get_pod(KEY, "gone") is None


def test_stopping_a_pod_that_is_gone_raises_pod_gone(
    stub: StubRunPod, adapter: RunPodCompute
) -> None:
    stub.on("podStop", gql_error("Pod not found."))
    stub.on("query pod", data({"pod": None}))
    with pytest.raises(PodGone):
        adapter.stop_pod(KEY, "gone")


def test_a_stop_that_errored_but_took_effect_is_accepted_after_a_re_read(
    stub: StubRunPod, adapter: RunPodCompute
) -> None:
    stub.on("podStop", gql_error("Something went wrong.", 500))
    stub.on("query pod", data({"pod": raw_pod("EXITED", runtime=False)}))
    adapter.stop_pod(KEY, "pod1")
    assert stub.count("podStop") == 1


def test_a_stop_that_errored_and_did_not_happen_is_tried_again(
    stub: StubRunPod, adapter: RunPodCompute
) -> None:
    stub.on("podStop", Answer(502, HTML_502), data({"podStop": {"id": "pod1"}}))
    stub.on("query pod", data({"pod": raw_pod()}))
    adapter.stop_pod(KEY, "pod1")
    assert stub.count("podStop") == 2


def test_a_resume_reported_as_something_went_wrong_that_started_the_pod_succeeds(
    stub: StubRunPod, adapter: RunPodCompute
) -> None:
    stub.on("podResume", gql_error("Something went wrong. Please try again later."))
    stub.on("query pod", data({"pod": raw_pod()}))
    assert adapter.resume_pod(KEY, "pod1", 1).status == POD_RUNNING
    assert stub.count("podResume") == 1


def test_a_resume_without_free_gpus_says_so_and_is_not_retried(
    stub: StubRunPod, adapter: RunPodCompute
) -> None:
    stub.on(
        "podResume",
        gql_error("There are not enough free GPUs on the host machine to start this pod."),
    )
    stub.on("query pod", data({"pod": raw_pod("EXITED", runtime=False)}))
    with pytest.raises(CapacityUnavailable, match="cannot be resumed"):
        adapter.resume_pod(KEY, "pod1", 1)
    assert stub.count("podResume") == 1


def test_terminating_a_pod_that_errored_but_is_gone_is_fine(
    stub: StubRunPod, adapter: RunPodCompute
) -> None:
    stub.on("podTerminate", Answer(502, HTML_502))
    stub.on("query pod", data({"pod": None}))
    adapter.terminate_pod(KEY, "pod1")
    assert stub.count("podTerminate") == 1


# ------------------------------------------------------------------ mapping


@pytest.mark.parametrize(
    ("raw", "runtime", "ours"),
    [
        ("RUNNING", {"ports": []}, POD_RUNNING),
        ("RUNNING", None, POD_STARTING),
        ("CREATED", None, POD_STARTING),
        ("RESTARTING", None, POD_STARTING),
        ("PAUSED", None, POD_RUNNING),  # frozen, still holding (and billing) its GPU
        ("PROVISIONING", None, POD_STARTING),
        ("STARTING", None, POD_STARTING),
        ("EXITED", None, POD_STOPPED),
        ("TERMINATED", None, POD_TERMINATED),
        ("ERROR", None, POD_ERROR),
        ("DEAD", None, POD_ERROR),
        ("MIGRATING", None, POD_UNKNOWN),
        ("", None, POD_UNKNOWN),
        (None, None, POD_UNKNOWN),
    ],
)
def test_runpod_statuses_map_to_ours_and_unknown_ones_to_unknown(
    raw: str | None, runtime: Any, ours: str
) -> None:
    assert pod_status(raw, runtime) == ours


def test_money_from_json_floats_keeps_its_decimal_digits() -> None:
    assert money(0.34) == Decimal("0.34")
    assert money(1.1) + money(2.2) == Decimal("3.3")
    assert money(None) == Decimal(0)


def test_billing_errors_map_like_graphql_errors(
    stub: StubRunPod, adapter: RunPodCompute, slept: list[float]
) -> None:
    t0, t1 = datetime(2026, 1, 1, tzinfo=UTC), datetime(2026, 1, 2, tzinfo=UTC)
    stub.on("/v2/billing/pods", Answer(401, {"title": "Unauthorized", "status": 401}))
    stub.on("/v2/billing/network-volumes", Answer(502, HTML_502))
    with pytest.raises(InvalidCredentials):
        adapter.billing_pods(KEY, t0, t1)
    with pytest.raises(ProviderUnavailable):
        adapter.billing_volumes(KEY, t0, t1)
    assert stub.count("/v2/billing/network-volumes") == 4
    first = stub.requests[0]
    assert first["method"] == "GET"
    assert first["headers"]["Authorization"] == f"Bearer {KEY}"
    assert "bucketSize=hour" in first["path"]
    assert "startTime=2026-01-01T00%3A00%3A00Z" in first["path"]
