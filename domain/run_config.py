"""What a run is asked to do (R1, R2): the configuration value and the rules it must pass."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from decimal import Decimal
from typing import Any

from domain.errors import DomainError
from domain.gpus import ensure_gpu_can_train
from domain.hyperparameters import checked_hyperparameters
from domain.rates import money

KINDS = ("trial", "full")
MAX_RUNTIME_MINUTES = {"trial": 240, "full": 4320}
MAX_GPU_COUNT = 8  # what the API's schema takes; RunPod rents up to 8 GPUs to a Pod
# The trainer trains on one GPU (no data or model parallelism): a second GPU would bill unused.
TRAINER_GPUS = 1


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """A run's configuration; its fields, in this order, are the `config` of RunDrafted and
    RunDraftUpdated events."""

    project_id: str
    dataset_version_id: str
    kind: str
    baseline_run_id: str | None = None
    base_model: str
    gpu_type_id: str
    gpu_count: int
    price_limit_per_hour: Decimal
    max_runtime_minutes: int
    # R16: every hyperparameter the run trains with (API names, `domain.hyperparameters`), and
    # which of them were defaulted from the base model's architecture rather than chosen. A
    # run drafted before R16 has neither: its manifest takes the architecture's defaults.
    hyperparameters: Mapping[str, Any] | None = None
    defaults: Sequence[str] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunConfig:
        """A configuration as an event stored it: no rules run, so stored runs always load."""
        values: dict[str, Any] = {f.name: data.get(f.name) for f in fields(cls)}
        return cls(**values)

    def as_dict(self) -> dict[str, Any]:
        """The event payload (events carry plain values, never our classes)."""
        return {name: getattr(self, name) for name in _FIELD_NAMES}

    def validated(self, need_gb: int | None = None) -> RunConfig:
        """R1/R2: the rules a configuration must pass without asking anyone (GPU, memory,
        limits); returns it normalised (a trial has no baseline, the price is a Decimal)."""
        if self.kind not in KINDS:
            raise InvalidRunConfig("kind must be trial or full", rule="kind")
        if self.kind == "full" and not self.baseline_run_id:
            raise InvalidRunConfig(
                "a full run needs a baseline run (baseline_run_id)", rule="baseline"
            )
        baseline = self.baseline_run_id or None if self.kind == "trial" else self.baseline_run_id
        for name in ("project_id", "dataset_version_id", "base_model", "gpu_type_id"):
            value = getattr(self, name)
            if not value or not str(value).strip():
                raise InvalidRunConfig(f"{name} is required", rule=name)
        count = self.gpu_count
        if not isinstance(count, int) or not 1 <= count <= MAX_GPU_COUNT:
            raise InvalidRunConfig(f"gpu_count must be 1 to {MAX_GPU_COUNT}", rule="gpu_count")
        if count > TRAINER_GPUS:
            raise InvalidRunConfig(
                f"gpu_count {count}: the trainer uses one GPU, so every GPU beyond the first "
                "would be billed and sit idle; use gpu_count 1 and choose a GPU whose memory "
                "covers the model",
                rule="gpu_count",
            )
        price = money(self.price_limit_per_hour)
        if not price.is_finite() or price <= 0:
            raise InvalidRunConfig("price_limit_per_hour must be positive", rule="price_limit")
        limit = MAX_RUNTIME_MINUTES[self.kind]
        minutes = self.max_runtime_minutes
        if not isinstance(minutes, int) or not 1 <= minutes <= limit:
            raise InvalidRunConfig(
                f"max_runtime_minutes must be 1 to {limit} for a {self.kind} run",
                rule="runtime_limit",
            )
        ensure_gpu_can_train(str(self.gpu_type_id), count, str(self.base_model), need_gb)
        if self.hyperparameters is not None:
            checked_hyperparameters(self.hyperparameters)
        if baseline == self.baseline_run_id and price is self.price_limit_per_hour:
            return self  # already normalised (a draft's config is validated twice)
        return replace(self, baseline_run_id=baseline, price_limit_per_hour=price)


# `fields` builds its tuple anew on every call; a draft's event asks once
_FIELD_NAMES = tuple(f.name for f in fields(RunConfig))


def ensure_offered_in_datacenter(gpu_type_id: str, datacenters: list[str], volume_dc: str) -> None:
    """R2: with a network volume the GPU must be offered in the volume's datacenter."""
    if volume_dc not in datacenters:
        raise GpuNotInVolumeDatacenter(
            f"{gpu_type_id} is not offered in {volume_dc}, the network volume's datacenter"
            + (f"; it is offered in {', '.join(datacenters)}" if datacenters else ""),
            rule="gpu_datacenter",
        )


def ensure_cuda13_hosts(gpu_type_id: str, no_cuda13: tuple[str, ...], volume_dc: str) -> None:
    """R2/R5: RunPod has the GPU in the volume's datacenter only on hosts whose driver is older
    than CUDA 13, where the trainer's container never starts."""
    if volume_dc in no_cuda13:
        raise NoCuda13Hosts(
            f"{gpu_type_id} has no host with a CUDA 13 driver in {volume_dc}, the network "
            "volume's datacenter: a Pod there could not start the trainer",
            rule="gpu_cuda",
            gpu_type_id=gpu_type_id,
            datacenter_id=volume_dc,
        )


class InvalidRunConfig(DomainError):
    problem = "invalid-run-config"
    title = "The run configuration breaks a rule"


class GpuNotInVolumeDatacenter(DomainError):
    problem = "gpu-not-in-volume-datacenter"
    title = "The GPU is not offered in the volume's datacenter"


class NoCuda13Hosts(DomainError):
    problem = "no-cuda13-hosts"
    title = "No host of this GPU in the volume's datacenter runs CUDA 13"
