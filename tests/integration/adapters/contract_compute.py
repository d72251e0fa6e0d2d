"""The ComputeProvider contract, run against the RunPod sandbox by every compute adapter.

Subclass `ComputeProviderContract` in a `test_*.py` module (pytest collects the subclass, not
this base) and implement `build(base_url, sleep)`. The sandbox serves GraphQL and REST v2 from
the same model, so a REST v2 adapter runs these very tests. `sleep` advances the sandbox clock
instead of sleeping, so backoff and listing lag cost no wall time.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from datetime import timedelta
from decimal import Decimal

import pytest

from application.errors import (
    CapacityUnavailable,
    InsufficientBalance,
    InsufficientPermissions,
    InvalidCredentials,
    ProviderError,
)
from application.ports import (
    POD_ERROR,
    POD_RUNNING,
    POD_STARTING,
    POD_STOPPED,
    POD_UNKNOWN,
    ComputeProvider,
    PodInfo,
    PodSpec,
)
from runpod_sandbox import Sandbox

EU_VOLUME, EU_DC = "nv7eu1ro4k", "EU-RO-1"
RTX_4090 = "NVIDIA GeForce RTX 4090"
TRAINER_IMAGE = "tensorant/trainer:contract"


def spec(name: str = "tensorant-run-contract", **overrides: object) -> PodSpec:
    fields: dict[str, object] = {
        "name": name,
        "image": TRAINER_IMAGE,
        "gpu_type_id": RTX_4090,
        "gpu_count": 1,
        "env": {"TENSORANT_RUN": name, "QUOTE": 'say "hi"'},
        "datacenter_id": EU_DC,
        "network_volume_id": EU_VOLUME,
        "min_cuda_version": "13.0",
        "container_disk_gb": 20,
    }
    fields.update(overrides)
    return PodSpec(**fields)  # type: ignore[arg-type]


def wait_for(
    read: Callable[[], PodInfo | None], ok: Callable[[PodInfo | None], bool], seconds: float = 3.0
) -> PodInfo | None:
    deadline = time.monotonic() + seconds
    pod = read()
    while not ok(pod) and time.monotonic() < deadline:
        time.sleep(0.03)
        pod = read()
    return pod


class ComputeProviderContract(ABC):
    """What any ComputeProvider must do against RunPod (as the sandbox plays it)."""

    @abstractmethod
    def build(self, base_url: str, sleep: Callable[[float], None]) -> ComputeProvider:
        """The adapter under test, pointed at the sandbox."""

    @pytest.fixture
    def sandbox(self) -> Iterator[Sandbox]:
        with Sandbox(startup_seconds=0.1) as sb:
            yield sb

    @pytest.fixture
    def slept(self) -> list[float]:
        return []

    @pytest.fixture
    def provider(self, sandbox: Sandbox, slept: list[float]) -> ComputeProvider:
        def sleep(seconds: float) -> None:
            slept.append(seconds)
            sandbox.advance_clock(seconds)

        return self.build(sandbox.base_url, sleep)

    @pytest.fixture
    def key(self, sandbox: Sandbox) -> str:
        return str(sandbox.credentials()["api_key"])

    # ------------------------------------------------------------ account and catalogue

    def test_a_valid_key_reads_the_account_with_balance_and_spend_as_decimals(
        self, provider: ComputeProvider, sandbox: Sandbox, key: str
    ) -> None:
        account = provider.check_account(key)
        assert account.id == sandbox.credentials()["account_id"]
        assert account.balance == Decimal("250")
        assert isinstance(account.spend_per_hour, Decimal)
        # C3: the probe proves nothing; its answer (the probe Pod is unknown) is kept.
        assert account.probe_answer is not None
        assert "not found" in account.probe_answer.lower()
        assert key not in account.probe_answer

    def test_an_unknown_key_is_refused_as_invalid_credentials(
        self, provider: ComputeProvider
    ) -> None:
        with pytest.raises(InvalidCredentials):
            provider.check_account("rpa_NOTAKEY0000000000000000000000000000000")

    def test_a_read_only_key_is_flagged_by_the_account_check_and_cannot_launch(
        self, provider: ComputeProvider, sandbox: Sandbox
    ) -> None:
        """C1: a key without Pod write access is refused at save time (a harmless probe)."""
        ro = str(sandbox.credentials()["read_only_api_key"])
        with pytest.raises(InsufficientPermissions, match="read-only"):
            provider.check_account(ro)
        with pytest.raises(InsufficientPermissions, match="read-only key"):
            provider.launch_pod(ro, spec("tensorant-run-readonly"))
        assert [p for p in sandbox.model.all_pods() if p.name == "tensorant-run-readonly"] == []

    def test_a_network_volume_grows_and_refuses_to_shrink(
        self, provider: ComputeProvider, key: str, sandbox: Sandbox
    ) -> None:
        volume = sandbox.model.volumes[EU_VOLUME]
        try:
            grown = provider.resize_volume(key, EU_VOLUME, 150)
            assert (grown.id, grown.size_gb) == (EU_VOLUME, 150) and volume.size_gb == 150
            with pytest.raises(ProviderError):
                provider.resize_volume(key, EU_VOLUME, 120)
            assert volume.size_gb == 150
        finally:
            volume.size_gb = 100

    def test_the_accounts_network_volumes_are_listed_with_their_datacenters(
        self, provider: ComputeProvider, key: str
    ) -> None:
        volumes = {v.id: v for v in provider.list_volumes(key)}
        assert volumes[EU_VOLUME].datacenter_id == EU_DC
        assert volumes[EU_VOLUME].size_gb == 100

    def test_gpu_offers_carry_decimal_prices_and_stock_per_datacenter(
        self, provider: ComputeProvider, key: str
    ) -> None:
        offers = {g.id: g for g in provider.list_gpus(key)}
        rtx = offers[RTX_4090]
        assert rtx.price_per_hour == Decimal("0.60")
        assert rtx.memory_gb == 24
        assert rtx.stock[EU_DC] == "High"
        h100 = offers["NVIDIA H100 80GB HBM3"]
        assert EU_DC not in h100.datacenters  # listed there, but out of stock
        assert "EUR-IS-1" in h100.datacenters

    def test_a_plain_gpu_ask_sees_runpods_stock_now_even_after_a_cached_ask(
        self, provider: ComputeProvider, sandbox: Sandbox, key: str
    ) -> None:
        """R4: a launch asks without `allow_cached`, so a draft's copy never hides a sell-out."""
        cached = {g.id: g for g in provider.list_gpus(key, allow_cached=True)}
        assert EU_DC in cached[RTX_4090].datacenters
        sandbox.model.set_stock(RTX_4090, "None")
        now = {g.id: g for g in provider.list_gpus(key)}
        assert now[RTX_4090].datacenters == []

    def test_runpods_placeholder_gpu_type_unknown_is_not_offered(
        self, provider: ComputeProvider, sandbox: Sandbox, key: str
    ) -> None:
        offers = {g.id for g in provider.list_gpus(key)}
        assert "unknown" not in offers
        assert RTX_4090 in offers

    def test_asking_for_more_gpus_than_any_machine_has_shows_no_stock(
        self, provider: ComputeProvider, key: str
    ) -> None:
        l40s = {g.id: g for g in provider.list_gpus(key, gpu_count=8)}["NVIDIA L40S"]
        assert l40s.datacenters == []

    # ------------------------------------------------------------ launch and reads

    def test_launching_twice_with_one_name_leaves_one_pod_on_the_network_volume(
        self, provider: ComputeProvider, sandbox: Sandbox, key: str
    ) -> None:
        first = provider.launch_pod(key, spec())
        second = provider.launch_pod(key, spec())
        assert second.id == first.id
        pods = [p for p in sandbox.model.all_pods() if p.name == spec().name]
        assert len(pods) == 1
        assert pods[0].network_volume_id == EU_VOLUME
        assert (pods[0].min_cuda_version, pods[0].allowed_cuda_versions) == ("13.0", [])
        assert pods[0].env["QUOTE"] == 'say "hi"'
        assert pods[0].cloud_type == "SECURE"
        assert pods[0].volume_mount_path == "/workspace"

    def test_cuda_13_or_newer_admits_a_13_1_host_where_exactly_13_0_finds_none(
        self, provider: ComputeProvider, sandbox: Sandbox, key: str
    ) -> None:
        """R5: EUR-IS-1's CUDA 13 hosts are 13.1 (seed); RunPod's allowedCudaVersions is an
        exact match, so only the minimum places the Pod there."""
        iceland = {"datacenter_id": "EUR-IS-1", "network_volume_id": None, "volume_gb": 20}
        pod = provider.launch_pod(key, spec("tensorant-run-cuda-min", **iceland))
        assert sandbox.model.pods[pod.id].cuda_version == "13.1"
        exact = {**iceland, "min_cuda_version": None, "allowed_cuda_versions": ("13.0",)}
        with pytest.raises(CapacityUnavailable):
            provider.launch_pod(key, spec("tensorant-run-cuda-exact", **exact))
        newer = {**iceland, "min_cuda_version": "13.2"}
        with pytest.raises(CapacityUnavailable):
            provider.launch_pod(key, spec("tensorant-run-cuda-newer", **newer))
        made = {p.name for p in sandbox.model.all_pods()}
        assert made == {"tensorant-run-cuda-min"}

    def test_a_same_named_pod_marked_for_another_run_is_not_taken_for_ours(
        self, provider: ComputeProvider, key: str
    ) -> None:
        theirs = provider.launch_pod(key, spec("tensorant-run-x", env={"TENSORANT_RUN_ID": "a"}))
        ours = provider.launch_pod(key, spec("tensorant-run-x", env={"TENSORANT_RUN_ID": "b"}))
        assert ours.id != theirs.id
        again = provider.launch_pod(key, spec("tensorant-run-x", env={"TENSORANT_RUN_ID": "b"}))
        assert again.id == ours.id

    def test_a_launched_pod_reports_price_placement_and_ssh_host(
        self, provider: ComputeProvider, key: str
    ) -> None:
        launched = provider.launch_pod(key, spec())
        assert launched.cost_per_hour == Decimal("0.60")
        pod = provider.get_pod(key, launched.id)
        assert pod is not None
        assert (pod.name, pod.gpu_type_id, pod.gpu_count) == (spec().name, RTX_4090, 1)
        assert (pod.datacenter_id, pod.network_volume_id) == (EU_DC, EU_VOLUME)
        assert pod.pod_host_id is not None
        assert pod.pod_host_id.startswith(pod.id)

    def test_a_new_pod_is_starting_until_its_runtime_is_up_then_running(
        self, provider: ComputeProvider, key: str
    ) -> None:
        launched = provider.launch_pod(key, spec())
        assert launched.status in (POD_STARTING, POD_RUNNING)
        pod = wait_for(
            lambda: provider.get_pod(key, launched.id),
            lambda p: p is not None and p.status == POD_RUNNING,
        )
        assert pod is not None
        assert pod.status == POD_RUNNING

    def test_list_pods_and_find_by_name_see_the_launched_pod(
        self, provider: ComputeProvider, key: str
    ) -> None:
        launched = provider.launch_pod(key, spec())
        assert launched.id in {p.id for p in provider.list_pods(key)}
        found = provider.find_pod_by_name(key, spec().name)
        assert found is not None
        assert found.id == launched.id
        assert provider.find_pod_by_name(key, "no-such-pod") is None

    def test_an_unknown_pod_id_reads_as_none(self, provider: ComputeProvider, key: str) -> None:
        assert provider.get_pod(key, "zzzzzzzzzzzzzz") is None

    # ------------------------------------------------------------ lifecycle

    def test_stop_then_resume_then_terminate_moves_the_pod_through_its_states(
        self, provider: ComputeProvider, key: str
    ) -> None:
        pod = provider.launch_pod(key, spec())
        provider.stop_pod(key, pod.id)
        stopped = provider.get_pod(key, pod.id)
        assert stopped is not None
        assert stopped.status == POD_STOPPED
        resumed = provider.resume_pod(key, pod.id, 1)
        assert resumed.status in (POD_STARTING, POD_RUNNING)
        assert resumed.cost_per_hour == Decimal("0.60")
        provider.terminate_pod(key, pod.id)
        assert provider.get_pod(key, pod.id) is None
        assert provider.find_pod_by_name(key, spec().name) is None

    def test_stopping_a_stopped_pod_and_terminating_a_gone_pod_are_harmless(
        self, provider: ComputeProvider, key: str
    ) -> None:
        pod = provider.launch_pod(key, spec())
        provider.stop_pod(key, pod.id)
        provider.stop_pod(key, pod.id)
        provider.terminate_pod(key, pod.id)
        provider.terminate_pod(key, pod.id)
        assert provider.get_pod(key, pod.id) is None

    def test_unknown_and_failed_provider_statuses_map_without_crashing(
        self, provider: ComputeProvider, sandbox: Sandbox, key: str
    ) -> None:
        pod = provider.launch_pod(key, spec())
        for raw, ours in (
            ("PAUSED_BY_MARTIANS", POD_UNKNOWN),
            ("CREATED", POD_STARTING),
            ("RESTARTING", POD_STARTING),
            ("PAUSED", POD_RUNNING),
            ("DEAD", POD_ERROR),
            ("ERROR", POD_ERROR),
            ("EXITED", POD_STOPPED),
        ):
            with sandbox.model.lock:
                sandbox.model.pods[pod.id].desired_status = raw
            seen = provider.get_pod(key, pod.id)
            assert seen is not None
            assert (seen.status, seen.provider_status) == (ours, raw)
            assert pod.id in {p.id for p in provider.list_pods(key)}

    # ------------------------------------------------------------ refusals

    def test_a_gpu_without_capacity_is_refused_as_capacity_unavailable(
        self, provider: ComputeProvider, sandbox: Sandbox, key: str
    ) -> None:
        sandbox.set_faults(capacity_gpu_types=[RTX_4090])
        with pytest.raises(CapacityUnavailable):
            provider.launch_pod(key, spec())
        assert sandbox.model.all_pods() == []

    def test_resume_without_free_gpus_is_capacity_unavailable_and_the_pod_stays_stopped(
        self, provider: ComputeProvider, sandbox: Sandbox, key: str
    ) -> None:
        pod = provider.launch_pod(key, spec())
        provider.stop_pod(key, pod.id)
        sandbox.set_faults(resume_no_gpus=True)
        with pytest.raises(CapacityUnavailable, match="resume"):
            provider.resume_pod(key, pod.id, 1)
        after = provider.get_pod(key, pod.id)
        assert after is not None
        assert after.status == POD_STOPPED

    def test_a_balance_below_one_hour_of_the_pod_is_insufficient_balance(
        self, provider: ComputeProvider, sandbox: Sandbox, key: str
    ) -> None:
        sandbox.model.set_balance("0.10")
        with pytest.raises(InsufficientBalance):
            provider.launch_pod(key, spec())

    def test_a_create_answered_with_500_after_the_pod_was_made_leaves_exactly_one_pod(
        self, provider: ComputeProvider, sandbox: Sandbox, key: str
    ) -> None:
        sandbox.set_faults(create_then_500=1, list_lag_seconds=0.5)
        pod = provider.launch_pod(key, spec())
        made = [p for p in sandbox.model.all_pods() if p.name == spec().name]
        assert [p.id for p in made] == [pod.id]
        assert provider.find_pod_by_name(key, spec().name) == provider.get_pod(key, pod.id)

    # ------------------------------------------------------------ billing

    def test_billing_has_hourly_records_for_the_pod_and_the_network_volumes(
        self, provider: ComputeProvider, sandbox: Sandbox, key: str
    ) -> None:
        start = sandbox.model.clock.now().replace(minute=0, second=0, microsecond=0)
        pod = provider.launch_pod(key, spec())
        sandbox.advance_clock(2 * 3600)
        end = start + timedelta(hours=4)
        pods = [r for r in provider.billing_pods(key, start, end) if r.resource_id == pod.id]
        assert pods
        assert all(r.end - r.start == timedelta(hours=1) for r in pods)
        assert all(isinstance(r.amount, Decimal) for r in pods)
        # two hours of an RTX 4090 at $0.60, plus disk
        assert Decimal("1.20") <= sum(r.amount for r in pods) < Decimal("1.30")
        volumes = provider.billing_volumes(key, start, end)
        eu = sum(r.amount for r in volumes if r.resource_id == EU_VOLUME)
        assert eu > 0  # 100 GB at $0.07/GB-month bills whether or not a Pod runs
