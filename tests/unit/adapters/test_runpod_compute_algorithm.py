"""RunPodCompute's algorithm (R5, K2, C1, C3) over a scripted wire: exactly which calls it makes,
how long it waits, and what it answers for each RunPod answer. The sandbox tests prove the same
over real HTTP; these pin the branches one by one (docs/mutation.md)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, cast

import pytest

from adapters.retry import RetryPolicy
from adapters.runpod.compute import READ_ONLY, RunPodCompute
from adapters.runpod.wire import Created, Outcome
from application.errors import (
    CapacityUnavailable,
    InsufficientBalance,
    InsufficientPermissions,
    InvalidCredentials,
    PodGone,
    ProviderError,
    ProviderUnavailable,
)
from application.ports import Account, GpuOffer, NetworkVolume, PodInfo, PodSpec

KEY = "rpa_KEY"
NAME = "tensorant-run-r1"


def pod(pod_id: str, status: str = "running", name: str = NAME, **kw: Any) -> PodInfo:
    return PodInfo(pod_id, name, status, Decimal("0.44"), **kw)


def spec(run_id: str | None = "r1") -> PodSpec:
    env = {"TENSORANT_RUN_ID": run_id} if run_id else {}
    return PodSpec(NAME, "img", "NVIDIA GeForce RTX 4090", 1, env)


def unavailable(text: str = "502", **extra: Any) -> ProviderUnavailable:
    return ProviderUnavailable(text, **extra)


@dataclass
class Wire:
    """A scripted RunPod: each queue holds the next answers (an exception is raised)."""

    name: str = "rest"
    listed: list[PodInfo] = field(default_factory=list)
    list_answers: list[Any] = field(default_factory=list)  # before `listed`
    reads: dict[str, Any] = field(default_factory=dict)  # pod id -> PodInfo | None | exception
    creates: list[Any] = field(default_factory=list)
    acts: list[Any] = field(default_factory=list)
    deletes: list[Any] = field(default_factory=list)
    probe_answer: Any = "pod not found"
    gpu_offers: list[GpuOffer] = field(default_factory=list)
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    fail_once: set[str] = field(default_factory=set)  # methods whose next call is a 502

    def _maybe_fail(self, method: str) -> None:
        if method in self.fail_once:
            self.fail_once.discard(method)
            raise unavailable()

    def _answer(self, value: Any) -> Any:
        if isinstance(value, BaseException):
            raise value
        return value

    def account(self, api_key: str) -> Account:
        self._maybe_fail("account")
        self.calls.append(("account", api_key))
        return Account("acct1", Decimal("10"), Decimal("0.5"))

    def volumes(self, api_key: str) -> list[NetworkVolume]:
        self._maybe_fail("volumes")
        self.calls.append(("volumes", api_key))
        return [NetworkVolume("v1", "data", 10, "EU-RO-1")]

    def gpus(self, api_key: str, gpu_count: int) -> list[GpuOffer]:
        self._maybe_fail("gpus")
        self.calls.append(("gpus", api_key, gpu_count))
        return self.gpu_offers

    def pods(self, api_key: str) -> list[PodInfo]:
        self._maybe_fail("pods")
        self.calls.append(("pods", api_key))
        if self.list_answers:
            return cast(list[PodInfo], self._answer(self.list_answers.pop(0)))
        return list(self.listed)

    def pod(self, api_key: str, pod_id: str) -> PodInfo | None:
        self._maybe_fail("pod")
        self.calls.append(("pod", pod_id))
        answer = self.reads.get(pod_id)
        if isinstance(answer, list):
            return cast(PodInfo | None, self._answer(answer.pop(0)))
        return cast(PodInfo | None, self._answer(answer))

    def create(self, api_key: str, spec: PodSpec) -> Created:
        self.calls.append(("create", spec.name))
        return cast(Created, self._answer(self.creates.pop(0)))

    def act(self, api_key: str, pod_id: str, action: str, gpu_count: int = 1) -> Outcome:
        self.calls.append(("act", pod_id, action, gpu_count))
        return cast(Outcome, self._answer(self.acts.pop(0)))

    def delete(self, api_key: str, pod_id: str) -> Outcome:
        self._maybe_fail("delete")
        self.calls.append(("delete", pod_id))
        return cast(Outcome, self._answer(self.deletes.pop(0)))

    def probe(self, api_key: str, pod_id: str) -> str:
        self._maybe_fail("probe")
        self.calls.append(("probe", pod_id))
        return cast(str, self._answer(self.probe_answer))


@dataclass
class Volumes:
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    fails: int = 0

    def resize_volume(self, api_key: str, volume_id: str, size_gb: int) -> NetworkVolume:
        self.calls.append(("resize", api_key, volume_id, size_gb))
        if self.fails:
            self.fails -= 1
            raise unavailable()
        return NetworkVolume(volume_id, "data", size_gb, "EU-RO-1")


@dataclass
class Billing:
    calls: list[tuple[Any, ...]] = field(default_factory=list)

    def pods(self, api_key: str, start: datetime, end: datetime) -> list[Any]:
        self.calls.append(("pods", api_key, start, end))
        return ["pod-record"]

    def volumes(self, api_key: str, start: datetime, end: datetime) -> list[Any]:
        self.calls.append(("volumes", api_key, start, end))
        return ["volume-record"]


@dataclass
class World:
    wire: Wire
    slept: list[float]
    compute: RunPodCompute
    volumes: Volumes
    billing: Billing


def world(lookup_attempts: int | None = None, volumes: Any = None, max_delay: float = 6.0) -> World:
    wire, slept = Wire(), cast(list[float], [])
    vols, billing = volumes or Volumes(), Billing()
    retry = RetryPolicy(
        max_attempts=3,
        base_delay_s=1.0,
        max_delay_s=max_delay,
        sleep=slept.append,
        jitter=lambda: 1.0,
    )
    kw: dict[str, Any] = {} if lookup_attempts is None else {"lookup_attempts": lookup_attempts}
    compute = RunPodCompute(
        cast(Any, wire),
        volumes=vols,
        billing=cast(Any, billing),
        retry=retry,
        registries=cast(Any, vols),
        **kw,
    )
    return World(wire, slept, compute, vols, billing)


def creates(w: World) -> int:
    return sum(1 for c in w.wire.calls if c[0] == "create")


# ------------------------------------------------------------ launch (R5)
def test_r5_a_pod_with_the_name_is_taken_instead_of_creating_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = world()
    w.wire.listed = [pod("other", name="tensorant-run-r2"), pod("p1")]
    with caplog.at_level(logging.INFO, logger="adapters.runpod.compute"):
        assert w.compute.launch_pod(KEY, spec()).id == "p1"
    assert w.wire.calls == [("pods", KEY)]
    # one Pod of that name is no duplicate
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, f"launch of {NAME!r}: Pod p1 already exists")
    ]


def test_r5_of_several_pods_with_the_name_the_oldest_is_taken_loudly(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = world()
    w.wire.listed = [pod("p1"), pod("p2")]
    with caplog.at_level(logging.ERROR, logger="adapters.runpod.compute"):
        assert w.compute.launch_pod(KEY, spec()).id == "p1"
    [record] = caplog.records
    assert record.levelno == logging.ERROR
    assert record.getMessage() == (
        f"DUPLICATE PODS named {NAME!r}: ['p1', 'p2']; using the oldest, p1 "
        "(the others cost money: clean up)"
    )


def test_r5_a_pod_marked_for_another_run_is_not_taken_but_an_unmarked_one_is() -> None:
    w = world()
    w.wire.listed = [pod("theirs", run_id="r2"), pod("unmarked"), pod("mine", run_id="r1")]
    assert w.compute.launch_pod(KEY, spec()).id == "unmarked"
    w.wire.listed = [pod("theirs", run_id="r2")]
    w.wire.creates = [Created(pod("new"), True)]
    assert w.compute.launch_pod(KEY, spec()).id == "new"
    w.wire.listed = [pod("theirs", run_id="r2")]
    assert w.compute.launch_pod(KEY, spec(run_id=None)).id == "theirs"  # no marker to compare


def test_r5_find_pod_by_name_takes_the_oldest_whatever_its_marker() -> None:
    w = world()
    w.wire.listed = [pod("x", name="other"), pod("p1", run_id="r9"), pod("p2")]
    assert w.compute.find_pod_by_name(KEY, NAME) == pod("p1", run_id="r9")
    assert w.compute.find_pod_by_name(KEY, "nobody") is None


def test_r5_a_complete_create_answer_is_the_pod() -> None:
    w = world()
    w.wire.creates = [Created(pod("p1", datacenter_id="EU-RO-1"), True)]
    assert w.compute.launch_pod(KEY, spec()) == pod("p1", datacenter_id="EU-RO-1")
    assert w.wire.calls == [("pods", KEY), ("create", NAME)]


def test_r5_an_incomplete_create_answer_is_read_back() -> None:
    w = world()
    w.wire.creates = [Created(pod("p1"), False)]
    w.wire.reads["p1"] = pod("p1", datacenter_id="EU-RO-1")
    assert w.compute.launch_pod(KEY, spec()).datacenter_id == "EU-RO-1"
    assert w.wire.calls[-1] == ("pod", "p1")


@pytest.mark.parametrize("read", [None, unavailable()])
def test_r5_an_unreadable_new_pod_is_the_create_answer(
    read: Any, caplog: pytest.LogCaptureFixture
) -> None:
    w = world()
    w.wire.creates = [Created(pod("p1"), False)]
    w.wire.reads["p1"] = read
    with caplog.at_level(logging.WARNING, logger="adapters.runpod.compute"):
        assert w.compute.launch_pod(KEY, spec()) == pod("p1")
    assert [r.getMessage() for r in caplog.records if r.name == "adapters.runpod.compute"] == [
        "Pod p1 was created but cannot be read back yet"
    ]


@pytest.mark.parametrize(
    "refusal",
    [
        InvalidCredentials("bad key"),
        InsufficientPermissions("read-only"),
        CapacityUnavailable("no 4090s"),
        InsufficientBalance("$0"),
    ],
)
def test_r5_a_definite_refusal_is_raised_without_looking_or_retrying(refusal: Exception) -> None:
    w = world()
    w.wire.creates = [refusal]
    with pytest.raises(type(refusal)):
        w.compute.launch_pod(KEY, spec())
    assert w.wire.calls == [("pods", KEY), ("create", NAME)]
    assert w.slept == []


def test_r5_a_doubtful_create_looks_again_with_growing_unjittered_waits() -> None:
    w = world()
    w.wire.creates = [unavailable()]
    w.wire.list_answers = [[], [], [], []]  # the first look, then three that lag
    w.wire.listed = [pod("p1")]
    assert w.compute.launch_pod(KEY, spec()).id == "p1"
    assert creates(w) == 1
    assert w.slept == [2.0, 4.0, 6.0]  # base 1 s x 2, 4, 8, capped at 6 s


def test_r5_a_doubtful_create_found_at_once_is_taken_without_waiting() -> None:
    w = world()
    w.wire.creates = [ProviderError("Something went wrong")]
    w.wire.list_answers = [[]]
    w.wire.listed = [pod("p1")]
    assert w.compute.launch_pod(KEY, spec()).id == "p1"
    assert w.slept == []


def test_r5_a_doubtful_create_that_made_nothing_is_tried_again_after_a_pause() -> None:
    w = world(lookup_attempts=2)
    w.wire.creates = [unavailable(), unavailable(), Created(pod("p1"), True)]
    assert w.compute.launch_pod(KEY, spec()).id == "p1"
    assert creates(w) == 3
    # per failed create: one wait between two looks (2 s), then the retry's pause (1 s, 2 s)
    assert w.slept == [2.0, 1.0, 2.0, 2.0]


def test_r5_creates_that_stay_doubtful_give_up_after_max_attempts() -> None:
    w = world(lookup_attempts=1)
    w.wire.creates = [unavailable("a"), unavailable("b"), unavailable("c")]
    with pytest.raises(ProviderUnavailable, match=r"^c$"):
        w.compute.launch_pod(KEY, spec())
    assert creates(w) == 3
    assert w.slept == [1.0, 2.0]


def test_r5_a_non_transient_doubtful_create_is_raised_after_looking() -> None:
    w = world(lookup_attempts=1)
    w.wire.creates = [ProviderError("Something went wrong")]
    with pytest.raises(ProviderError, match="Something went wrong"):
        w.compute.launch_pod(KEY, spec())
    assert w.wire.calls == [("pods", KEY), ("create", NAME), ("pods", KEY)]


def test_r5_when_the_listing_cannot_be_read_no_second_create_is_tried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = world(lookup_attempts=2)
    w.wire.creates = [unavailable("timeout")]
    w.wire.list_answers = [[], [], unavailable()]
    with (
        caplog.at_level(logging.WARNING, logger="adapters.runpod.compute"),
        pytest.raises(ProviderUnavailable) as caught,
    ):
        w.compute.launch_pod(KEY, spec())
    assert [r.getMessage() for r in caplog.records] == [
        f"create of {NAME!r} failed (timeout); looking it up",
        f"create of {NAME!r}: the Pod list cannot be read, so no new create; the next launch "
        "looks the name up first",
    ]
    assert caught.value.detail == (
        f"the create of {NAME} may have made a Pod and RunPod's Pod list could not be read; it "
        "is looked up by name before any new create"
    )
    assert creates(w) == 1
    assert w.slept == [2.0]


def test_r5_a_listing_that_comes_back_on_the_last_look_allows_another_create() -> None:
    w = world(lookup_attempts=2)
    w.wire.creates = [unavailable(), Created(pod("p1"), True)]
    w.wire.list_answers = [[], unavailable(), []]
    assert w.compute.launch_pod(KEY, spec()).id == "p1"
    assert creates(w) == 2


def test_r5_a_rate_limited_create_was_not_processed_and_is_repeated_after_its_wait() -> None:
    w = world()
    w.wire.creates = [
        unavailable("429", rate_limited=True, retry_after_s=5),
        Created(pod("p1"), True),
    ]
    assert w.compute.launch_pod(KEY, spec()).id == "p1"
    assert w.wire.calls == [("pods", KEY), ("create", NAME), ("create", NAME)]
    assert w.slept == [5.0]


def test_r5_four_looks_by_default_and_at_least_one() -> None:
    w = world()
    w.wire.creates = [ProviderError("x")]
    with pytest.raises(ProviderError):
        w.compute.launch_pod(KEY, spec())
    assert [c[0] for c in w.wire.calls].count("pods") == 1 + 4
    w = world(lookup_attempts=0)
    w.wire.creates = [ProviderError("x")]
    with pytest.raises(ProviderError):
        w.compute.launch_pod(KEY, spec())
    assert [c[0] for c in w.wire.calls].count("pods") == 1 + 1


# ------------------------------------------------------------ stop, resume, terminate (K2)
def test_k2_an_action_runpod_takes_is_done_in_one_call() -> None:
    w = world()
    w.wire.acts = [Outcome.DONE]
    w.compute.stop_pod(KEY, "p1")
    assert w.wire.calls == [("act", "p1", "stop", 1)]


def test_k2_stopping_a_pod_runpod_does_not_know_is_pod_gone() -> None:
    w = world()
    w.wire.acts = [Outcome.GONE]
    with pytest.raises(PodGone) as caught:
        w.compute.stop_pod(KEY, "p1")
    assert caught.value.detail == "Pod p1 is gone; it cannot stop"


def test_k2_a_conflict_is_fine_when_the_pod_is_already_where_it_should_be() -> None:
    w = world()
    w.wire.acts = [Outcome.CONFLICT]
    w.wire.reads["p1"] = pod("p1", "stopped")
    w.compute.stop_pod(KEY, "p1")
    w.wire.acts = [Outcome.CONFLICT]
    w.wire.reads["p1"] = pod("p1", "running")
    with pytest.raises(ProviderError) as caught:
        w.compute.stop_pod(KEY, "p1")
    assert type(caught.value) is ProviderError
    assert caught.value.detail == "RunPod refused to stop Pod p1 in its status"


def test_k2_an_action_that_may_not_have_happened_is_decided_by_reading_the_pod() -> None:
    w = world()
    w.wire.acts = [unavailable()]
    w.wire.reads["p1"] = pod("p1", "stopped")
    w.compute.stop_pod(KEY, "p1")
    assert w.wire.calls == [("act", "p1", "stop", 1), ("pod", "p1")]
    assert w.slept == []


def test_k2_an_action_not_taken_is_tried_again_after_a_pause_until_max_attempts() -> None:
    w = world()
    w.wire.acts = [unavailable(), unavailable(), unavailable("last")]
    w.wire.reads["p1"] = pod("p1", "running")
    with pytest.raises(ProviderUnavailable, match=r"^last$"):
        w.compute.stop_pod(KEY, "p1")
    assert [c[0] for c in w.wire.calls] == ["act", "pod"] * 3
    assert w.slept == [1.0, 2.0]


def test_k2_a_non_transient_error_is_raised_after_reading_the_pod() -> None:
    w = world()
    w.wire.acts = [ProviderError("Something went wrong")]
    w.wire.reads["p1"] = pod("p1", "running")
    with pytest.raises(ProviderError, match="Something went wrong"):
        w.compute.stop_pod(KEY, "p1")
    assert [c[0] for c in w.wire.calls] == ["act", "pod"]


@pytest.mark.parametrize("refusal", [InvalidCredentials("k"), InsufficientPermissions("ro")])
def test_k2_a_refused_key_is_raised_without_reading_the_pod(refusal: Exception) -> None:
    w = world()
    w.wire.acts = [refusal]
    with pytest.raises(type(refusal)):
        w.compute.stop_pod(KEY, "p1")
    assert [c[0] for c in w.wire.calls] == ["act"]


def test_k2_a_rate_limited_action_is_repeated_without_reading_the_pod() -> None:
    w = world()
    w.wire.acts = [unavailable("429", rate_limited=True, retry_after_s=3), Outcome.DONE]
    w.compute.stop_pod(KEY, "p1")
    assert [c[0] for c in w.wire.calls] == ["act", "act"]
    assert w.slept == [3.0]


def test_k2_a_rate_limit_on_the_last_attempt_reads_the_pod_and_gives_up() -> None:
    w = world()
    w.wire.acts = [unavailable("429", rate_limited=True, retry_after_s=0)] * 3
    w.wire.reads["p1"] = pod("p1", "running")
    with pytest.raises(ProviderUnavailable):
        w.compute.stop_pod(KEY, "p1")
    assert [c[0] for c in w.wire.calls] == ["act", "act", "act", "pod"]


def test_r11_a_resume_returns_the_pod_read_after_it() -> None:
    w = world()
    w.wire.acts = [Outcome.DONE]
    w.wire.reads["p1"] = pod("p1", "running", gpu_count=2)
    assert w.compute.resume_pod(KEY, "p1", 2) == pod("p1", "running", gpu_count=2)
    assert w.wire.calls == [("act", "p1", "start", 2), ("pod", "p1")]


def test_r11_a_resume_with_fewer_gpus_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    w = world()
    w.wire.acts = [Outcome.DONE]
    w.wire.reads["p1"] = pod("p1", "running", gpu_count=1)
    with caplog.at_level(logging.WARNING, logger="adapters.runpod.compute"):
        assert w.compute.resume_pod(KEY, "p1", 2).gpu_count == 1
    assert [r.getMessage() for r in caplog.records] == ["Pod p1 resumed with 1 GPUs, not 2"]


def test_r11_a_pod_gone_after_its_resume_is_pod_gone() -> None:
    w = world()
    w.wire.acts = [Outcome.DONE]
    w.wire.reads["p1"] = None
    with pytest.raises(PodGone) as caught:
        w.compute.resume_pod(KEY, "p1", 1)
    assert caught.value.detail == "Pod p1 is gone"


@pytest.mark.parametrize("status", ["running", "starting"])
def test_r11_a_conflicting_resume_of_a_pod_already_up_is_done(status: str) -> None:
    w = world()
    w.wire.acts = [Outcome.CONFLICT]
    w.wire.reads["p1"] = pod("p1", status)
    assert w.compute.resume_pod(KEY, "p1", 1).status == status


def test_r11_no_capacity_to_resume_is_raised_at_once() -> None:
    w = world()
    w.wire.acts = [CapacityUnavailable("no GPUs on this host")]
    w.wire.reads["p1"] = pod("p1", "stopped")
    with pytest.raises(CapacityUnavailable):
        w.compute.resume_pod(KEY, "p1", 1)
    assert [c[0] for c in w.wire.calls] == ["act", "pod"]


def test_k2_a_terminate_runpod_takes_or_a_pod_already_gone_is_done() -> None:
    w = world()
    w.wire.acts = [Outcome.DONE]
    w.compute.terminate_pod(KEY, "p1")
    w.wire.acts = [Outcome.GONE]
    w.wire.reads["p1"] = None
    w.compute.terminate_pod(KEY, "p1")
    w.wire.acts = [unavailable()]
    w.compute.terminate_pod(KEY, "p1")
    assert [c[0] for c in w.wire.calls] == ["act", "act", "pod", "act", "pod"]


def test_k2_a_terminate_refused_in_the_pods_status_deletes_it() -> None:
    w = world()
    w.wire.acts = [Outcome.CONFLICT]
    w.wire.reads["p1"] = pod("p1", "stopped")
    w.wire.deletes = [Outcome.DONE]
    w.compute.terminate_pod(KEY, "p1")
    assert w.wire.calls == [("act", "p1", "terminate", 1), ("pod", "p1"), ("delete", "p1")]
    w.wire.acts = [Outcome.CONFLICT]
    w.wire.deletes = [Outcome.CONFLICT]
    with pytest.raises(ProviderError) as caught:
        w.compute.terminate_pod(KEY, "p1")
    assert caught.value.detail == "RunPod refused to delete Pod p1 in its status"


def test_k2_a_delete_that_may_not_have_happened_is_retried_like_a_read() -> None:
    w = world()
    w.wire.acts = [Outcome.CONFLICT]
    w.wire.reads["p1"] = pod("p1", "stopped")
    w.wire.deletes = [unavailable(), Outcome.GONE]
    w.compute.terminate_pod(KEY, "p1")
    assert [c[0] for c in w.wire.calls][-2:] == ["delete", "delete"]


# ------------------------------------------------------------ the key check (C1, C3)
def test_c1_the_account_carries_the_probes_answer_with_the_wire_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = world()
    with caplog.at_level(logging.INFO, logger="adapters.runpod.compute"):
        account = w.compute.check_account(KEY)
    assert [r.getMessage() for r in caplog.records] == [
        "permission probe answered 'rest: pod not found'; write permission stays unproven"
    ]
    assert account == Account(
        "acct1", Decimal("10"), Decimal("0.5"), probe_answer="rest: pod not found"
    )
    assert w.wire.calls == [("account", KEY), ("probe", "tensorant-permission-probe")]


def test_c3_a_probe_refused_as_unauthorized_is_a_read_only_key() -> None:
    w = world()
    w.wire.probe_answer = InsufficientPermissions("403")
    with pytest.raises(InsufficientPermissions) as caught:
        w.compute.check_account(KEY)
    assert caught.value.detail == READ_ONLY


def test_c1_an_invalid_key_on_the_probe_is_invalid() -> None:
    w = world()
    w.wire.probe_answer = InvalidCredentials("401 bad key")
    with pytest.raises(InvalidCredentials, match="401 bad key"):
        w.compute.check_account(KEY)


@pytest.mark.parametrize(
    ("answer", "recorded"),
    [
        (unavailable("timed out"), "rest: no answer after 3 attempts: timed out"),
        (ProviderError("odd", provider_message="pod not found"), "rest: refused: pod not found"),
        (ProviderError("odd"), "rest: refused: odd"),
        ("x" * 300, "rest: " + "x" * 234),
    ],
)
def test_c3_any_other_probe_answer_is_recorded_not_judged(answer: Any, recorded: str) -> None:
    w = world()
    w.wire.probe_answer = answer
    assert w.compute.check_account(KEY).probe_answer == recorded


# ------------------------------------------------------------ reads and the rest
def test_reads_are_retried_with_backoff() -> None:
    w = world()
    w.wire.list_answers = [unavailable(), unavailable(), [pod("p1")]]
    assert w.compute.list_pods(KEY) == [pod("p1")]
    assert w.slept == [1.0, 2.0]
    w.wire.reads["p1"] = [unavailable(), pod("p1")]
    assert w.compute.get_pod(KEY, "p1") == pod("p1")
    assert w.compute.list_volumes(KEY) == [NetworkVolume("v1", "data", 10, "EU-RO-1")]


def test_placeholder_gpu_types_are_not_offered() -> None:
    w = world()
    offers = [
        GpuOffer("unknown", "?", 0, Decimal(0)),
        GpuOffer("UNKNOWN", "?", 0, Decimal(0)),
        GpuOffer("NVIDIA A40", "A40", 48, Decimal("0.4")),
    ]
    w.wire.gpu_offers = offers
    assert w.compute.list_gpus(KEY, cast(Any, "2")) == offers[2:]
    assert w.wire.calls == [("gpus", KEY, 2)]
    assert w.compute.list_gpus(KEY) == offers[2:]
    assert w.wire.calls[-1] == ("gpus", KEY, 1)


def test_s6_a_resize_is_retried_like_a_read() -> None:
    w = world(volumes=Volumes(fails=1))
    assert w.compute.resize_volume(KEY, "v1", 200) == NetworkVolume("v1", "data", 200, "EU-RO-1")
    assert w.volumes.calls == [("resize", KEY, "v1", 200)] * 2
    assert w.slept == [1.0]


def test_b4_billing_is_read_over_rest_whatever_the_wire() -> None:
    w = world()
    start, end = datetime(2026, 6, 1, tzinfo=UTC), datetime(2026, 6, 2, tzinfo=UTC)
    assert w.compute.billing_pods(KEY, start, end) == cast(Any, ["pod-record"])
    assert w.compute.billing_volumes(KEY, start, end) == cast(Any, ["volume-record"])
    assert w.billing.calls == [("pods", KEY, start, end), ("volumes", KEY, start, end)]


def test_pod_logs_come_from_rest_or_not_at_all() -> None:
    assert list(world().compute.pod_logs(KEY, "p1")) == []

    @dataclass
    class Follower(Volumes):
        def pod_logs(
            self, api_key: str, pod_id: str, last_event_id: str | None, tail: int
        ) -> Iterator[Any]:
            yield (api_key, pod_id, last_event_id, tail)

    w = world(volumes=Follower())
    first: list[Any] = list(w.compute.pod_logs(KEY, "p1"))
    assert first == [(KEY, "p1", None, 5000)]
    later: list[Any] = list(w.compute.pod_logs(KEY, "p1", "e9", 10))
    assert later == [(KEY, "p1", "e9", 10)]


@pytest.mark.parametrize(
    ("method", "call", "line"),
    [
        ("account", lambda c: c.check_account(KEY), "rest account failed (502); retry 1 of 2"),
        (
            "probe",
            lambda c: c.check_account(KEY),
            "rest permission probe failed (502); retry 1 of 2",
        ),
        (
            "volumes",
            lambda c: c.list_volumes(KEY),
            "rest network volumes failed (502); retry 1 of 2",
        ),
        ("gpus", lambda c: c.list_gpus(KEY), "rest GPU types failed (502); retry 1 of 2"),
        ("pods", lambda c: c.list_pods(KEY), "rest pods failed (502); retry 1 of 2"),
        ("pod", lambda c: c.get_pod(KEY, "p1"), "rest pod failed (502); retry 1 of 2"),
        (
            "resize",
            lambda c: c.resize_volume(KEY, "v1", 20),
            "volume resize failed (502); retry 1 of 2",
        ),
    ],
)
def test_each_retried_call_names_itself_in_the_retry_log(
    caplog: pytest.LogCaptureFixture, method: str, call: Any, line: str
) -> None:
    w = world(volumes=Volumes(fails=1) if method == "resize" else None)
    w.wire.fail_once.add(method)
    with caplog.at_level(logging.INFO, logger="adapters.retry"):
        call(w.compute)
    assert [r.getMessage() for r in caplog.records if r.name == "adapters.retry"] == [line]


def test_a_delete_retry_names_itself_in_the_retry_log(caplog: pytest.LogCaptureFixture) -> None:
    w = world()
    w.wire.acts = [Outcome.CONFLICT]
    w.wire.reads["p1"] = pod("p1", "stopped")
    w.wire.deletes = [Outcome.DONE]
    w.wire.fail_once.add("delete")
    with caplog.at_level(logging.INFO, logger="adapters.retry"):
        w.compute.terminate_pod(KEY, "p1")
    assert [r.getMessage() for r in caplog.records if r.name == "adapters.retry"] == [
        "rest delete failed (502); retry 1 of 2"
    ]


def test_r5_looking_again_skips_a_pod_marked_for_another_run() -> None:
    w = world(lookup_attempts=1)
    w.wire.creates = [unavailable(), Created(pod("new"), True)]
    w.wire.list_answers = [[], [pod("theirs", run_id="r2")]]
    assert w.compute.launch_pod(KEY, spec()).id == "new"
    assert creates(w) == 2


def test_r5_duplicates_found_when_looking_again_or_by_name_are_named_in_the_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = world()
    w.wire.creates = [unavailable()]
    w.wire.list_answers = [[]]
    w.wire.listed = [pod("p1"), pod("p2")]
    with caplog.at_level(logging.ERROR, logger="adapters.runpod.compute"):
        assert w.compute.launch_pod(KEY, spec()).id == "p1"
        assert w.compute.find_pod_by_name(KEY, NAME) == pod("p1")
    assert [r.getMessage() for r in caplog.records] == [
        f"DUPLICATE PODS named {NAME!r}: ['p1', 'p2']; using the oldest, p1 "
        "(the others cost money: clean up)"
    ] * 2


def test_r5_a_look_that_fails_is_logged_with_the_name_and_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = world(lookup_attempts=1)
    w.wire.creates = [unavailable()]
    w.wire.list_answers = [[], unavailable("listing down")]
    with (
        caplog.at_level(logging.INFO, logger="adapters.runpod.compute"),
        pytest.raises(ProviderUnavailable),
    ):
        w.compute.launch_pod(KEY, spec())
    assert f"lookup of {NAME!r} failed (listing down)" in [r.getMessage() for r in caplog.records]


def test_r5_the_waits_between_looks_double() -> None:
    w = world(max_delay=100.0)
    w.wire.creates = [unavailable()]
    w.wire.list_answers = [[], [], [], []]
    w.wire.listed = [pod("p1")]
    assert w.compute.launch_pod(KEY, spec()).id == "p1"
    assert w.slept == [2.0, 4.0, 8.0]


def test_k2_a_refused_terminate_is_logged_before_the_delete(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = world()
    w.wire.acts = [Outcome.CONFLICT]
    w.wire.reads["p1"] = pod("p1", "stopped")
    w.wire.deletes = [Outcome.DONE]
    with caplog.at_level(logging.WARNING, logger="adapters.runpod.compute"):
        w.compute.terminate_pod(KEY, "p1")
    assert [r.getMessage() for r in caplog.records] == [
        "terminate of Pod p1 refused in its status; deleting it"
    ]


@pytest.mark.parametrize("first", [unavailable(), Outcome.CONFLICT])
def test_k2_a_pod_gone_after_a_doubtful_or_refused_stop_is_pod_gone(first: Any) -> None:
    w = world()
    w.wire.acts = [first]
    w.wire.reads["p1"] = None
    with pytest.raises(PodGone) as caught:
        w.compute.stop_pod(KEY, "p1")
    assert caught.value.detail == "Pod p1 is gone; it cannot stop"


def test_k2_a_gone_answer_for_a_pod_that_is_there_is_decided_by_its_status() -> None:
    w = world()
    w.wire.acts = [Outcome.GONE]
    w.wire.reads["p1"] = pod("p1", "stopped")
    w.compute.stop_pod(KEY, "p1")
    assert [c[0] for c in w.wire.calls] == ["act", "pod"]


def test_k2_a_refused_terminate_of_a_pod_already_gone_needs_no_delete() -> None:
    w = world()
    w.wire.acts = [Outcome.CONFLICT]
    w.wire.reads["p1"] = None
    w.compute.terminate_pod(KEY, "p1")
    assert [c[0] for c in w.wire.calls] == ["act", "pod"]


def test_k2_a_retried_action_waits_as_long_as_runpod_asks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = world()
    w.wire.acts = [unavailable("busy", retry_after_s=5), Outcome.DONE]
    w.wire.reads["p1"] = pod("p1", "running")
    with caplog.at_level(logging.WARNING, logger="adapters.runpod.compute"):
        w.compute.stop_pod(KEY, "p1")
    assert w.slept == [5.0]
    assert [r.getMessage() for r in caplog.records] == [
        "stop of Pod p1 failed (busy); re-reading it"
    ]


# ---------------------------------------------------------------- registry credentials


@dataclass
class Registries(Volumes):
    """REST v2 `/v2/registries`: a create may take effect and still answer 5xx."""

    saved: dict[str, str] = field(default_factory=dict)  # id -> name
    lost_answers: int = 0

    def registries(self, api_key: str) -> list[dict[str, Any]]:
        return [{"id": i, "name": n} for i, n in self.saved.items()]

    def create_registry(self, api_key: str, name: str, username: str, password: str) -> str:
        reg_id = f"cra_{len(self.calls)}"
        self.calls.append(("create", name))
        self.saved[reg_id] = name
        if self.lost_answers:
            self.lost_answers -= 1
            raise unavailable()
        return reg_id

    def delete_registry(self, api_key: str, registry_id: str) -> None:
        self.calls.append(("delete", registry_id))
        self.saved.pop(registry_id, None)


def test_registry_credentials_are_one_set_per_name_even_after_a_lost_answer() -> None:
    regs = Registries(saved={"cra_old": "tensorant-org", "cra_other": "someone-elses"})
    w = world(volumes=regs)
    first = w.compute.save_registry_auth(KEY, "tensorant-org", "bot", "s3cret")
    assert ("delete", "cra_old") in regs.calls  # the earlier set of that name is replaced
    assert sorted(regs.saved.values()) == ["someone-elses", "tensorant-org"]
    regs.lost_answers = 1  # RunPod saved them, then the answer was lost: found by name
    second = w.compute.save_registry_auth(KEY, "tensorant-org", "bot", "n3w")
    assert second != first and regs.saved[second] == "tensorant-org"
    assert sorted(regs.saved.values()) == ["someone-elses", "tensorant-org"]
    assert [c[0] for c in regs.calls].count("create") == 2  # never created twice for one call
