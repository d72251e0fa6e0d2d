"""R2 on a draft: the GPU offers are RunPod's copy of a few seconds ago, found by the
organization's connection at its version, so a draft with a warm copy reads no key from the
vault; a new version of the connection (a rotated key) finds no copy and reads the key again."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from adapters.retry import RetryPolicy
from adapters.runpod.compute import RunPodCompute
from adapters.runpod.offer_cache import OfferCache
from adapters.runpod.wire import Wire
from application.ports import GpuOffer
from tests.builders import trial
from tests.fakes import GOOD_KEY, FakeCompute, FakeVault
from tests.unit.application.conftest import new_services, seed_org

ROTATED_KEY = "rpa_" + "D" * 36 + "ROTA"


@dataclass
class CountingWire:
    """RunPod's GPU types as the fake account answers them, counting the asks."""

    compute: FakeCompute
    name: str = "fake"
    asked: list[str] = field(default_factory=list)

    def gpus(self, api_key: str, gpu_count: int) -> list[GpuOffer]:
        self.asked.append(api_key)
        return FakeCompute.list_gpus(self.compute, api_key, gpu_count)


@dataclass
class CopyingCompute(FakeCompute):
    """FakeCompute whose GPU offers go through RunPodCompute's copy (the real `OfferCache`)."""

    wire: CountingWire | None = None
    real: RunPodCompute | None = None

    def __post_init__(self) -> None:
        self.wire = CountingWire(self)
        self.real = RunPodCompute(
            cast(Wire, self.wire),
            volumes=cast(Any, None),
            billing=cast(Any, None),
            retry=RetryPolicy(max_attempts=1),
            offers=OfferCache(30.0),
        )

    @property
    def asked(self) -> list[str]:
        assert self.wire is not None
        return self.wire.asked

    def cached_gpus(self, account: str, gpu_count: int = 1) -> list[GpuOffer] | None:
        assert self.real is not None
        return self.real.cached_gpus(account, gpu_count)

    def list_gpus(self, api_key: str, gpu_count: int = 1, **ask: Any) -> list[GpuOffer]:
        assert self.real is not None
        return self.real.list_gpus(api_key, gpu_count, **ask)


@dataclass
class CountingVault(FakeVault):
    reads: int = 0

    def get(self, org_id: str, name: str) -> str:
        self.reads += 1
        return super().get(org_id, name)


def test_a_draft_with_a_warm_copy_reads_no_key_and_a_rotation_reads_it_again(
    tmp_path: Path,
) -> None:
    compute = CopyingCompute()
    compute.accounts[ROTATED_KEY] = compute.accounts[GOOD_KEY]  # the same account's new key
    vault = CountingVault()
    fakes = new_services(tmp_path, compute=compute, vault=vault)
    org, first = seed_org(fakes.services)
    config = fakes.services.log.run(org, first).config
    runs = fakes.services.runs

    vault.reads = 0
    runs.draft(org, "owner", config)
    assert vault.reads == 0  # the first draft's copy, found by the connection's name
    assert compute.asked == [GOOD_KEY]

    fakes.services.connections.rotate_key(org, "owner", ROTATED_KEY)
    vault.reads = 0
    runs.draft(org, "owner", config)
    assert vault.reads == 1  # a new version of the connection: the key is read
    assert compute.asked == [GOOD_KEY, ROTATED_KEY]  # and its offers asked with the new key
    runs.draft(org, "owner", trial(config.project_id, config.dataset_version_id))
    assert vault.reads == 1 and len(compute.asked) == 2
