"""GPU and base-model tables (R2) as data: architecture and memory decide what can train."""

from __future__ import annotations

from dataclasses import dataclass

from domain.errors import DomainError
from domain.memory import CATALOGUE_VOCAB, catalogue_shape, memory_need, need_gb

AMPERE, ADA, HOPPER, BLACKWELL = "ampere", "ada", "hopper", "blackwell"
VOLTA, TURING, CDNA3 = "volta", "turing", "cdna3"
ELIGIBLE_ARCHITECTURES = frozenset({AMPERE, ADA, HOPPER, BLACKWELL})


@dataclass(frozen=True)
class GpuType:
    id: str
    display_name: str
    memory_gb: int
    architecture: str


def _g(id_: str, display: str, mem: int, arch: str) -> GpuType:
    return GpuType(id_, display, mem, arch)


# R2 (docs/runpod.md, GPUs): ids exactly as RunPod spells them (never match on display names).
GPU_TYPES: dict[str, GpuType] = {
    g.id: g
    for g in (
        _g("NVIDIA A100 80GB PCIe", "A100 PCIe", 80, AMPERE),
        _g("NVIDIA A100-SXM4-80GB", "A100 SXM", 80, AMPERE),
        _g("NVIDIA A100-SXM4-40GB", "A100 SXM 40GB", 40, AMPERE),
        _g("NVIDIA A30", "A30", 24, AMPERE),
        _g("NVIDIA A40", "A40", 48, AMPERE),
        _g("NVIDIA RTX A4000", "RTX A4000", 16, AMPERE),
        _g("NVIDIA RTX A4500", "RTX A4500", 20, AMPERE),
        _g("NVIDIA RTX A5000", "RTX A5000", 24, AMPERE),
        _g("NVIDIA RTX A6000", "RTX A6000", 48, AMPERE),
        _g("NVIDIA GeForce RTX 3090", "RTX 3090", 24, AMPERE),
        _g("NVIDIA GeForce RTX 4090", "RTX 4090", 24, ADA),
        _g("NVIDIA L4", "L4", 24, ADA),
        _g("NVIDIA L40", "L40", 48, ADA),
        _g("NVIDIA L40S", "L40S", 48, ADA),
        _g("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada", 48, ADA),
        _g("NVIDIA H100 80GB HBM3", "H100 SXM", 80, HOPPER),
        _g("NVIDIA H100 PCIe", "H100 PCIe", 80, HOPPER),
        _g("NVIDIA H100 NVL", "H100 NVL", 94, HOPPER),
        _g("NVIDIA H200", "H200 SXM", 141, HOPPER),
        _g("NVIDIA B200", "B200", 180, BLACKWELL),
        _g("NVIDIA GeForce RTX 5090", "RTX 5090", 32, BLACKWELL),
        _g("NVIDIA RTX PRO 6000 Blackwell Server Edition", "RTX PRO 6000", 96, BLACKWELL),
        _g("Tesla V100-PCIE-16GB", "V100 PCIe", 16, VOLTA),
        _g("Tesla V100-SXM2-16GB", "V100 SXM2", 16, VOLTA),
        _g("Tesla V100-SXM2-32GB", "V100 SXM2 32GB", 32, VOLTA),
        _g("Tesla T4", "T4", 16, TURING),
        _g("AMD Instinct MI300X OAM", "MI300X", 192, CDNA3),
    )
}

# Memory a LoRA fine-tune of each catalogue model needs on one GPU (whole GB) at the default
# sequence length and rank, from the memory model (domain/memory.py, docs/memory.md).
BASE_MODELS: dict[str, int] = {
    model_id: need_gb(shape)
    for model_id in CATALOGUE_VOCAB
    if (shape := catalogue_shape(model_id)) is not None
}


def gpu_type(gpu_type_id: str, memory_gb: int | None = None) -> GpuType:
    known = GPU_TYPES.get(gpu_type_id)
    if known is None:
        # Unknown to our table: treat as ineligible rather than guess its architecture.
        return GpuType(gpu_type_id, gpu_type_id, memory_gb or 0, "unknown")
    return known


def ineligible_reason(gpu_type_id: str) -> str | None:
    """R2: why a GPU type cannot run the trainer, or None when it can."""
    g = gpu_type(gpu_type_id)
    if g.architecture in ELIGIBLE_ARCHITECTURES:
        return None
    if g.architecture in (VOLTA, TURING):
        return (
            f"{g.display_name} ({g.id}) is a pre-Ampere GPU ({g.architecture.title()}); the "
            "trainer needs Ampere or newer (A100, A40, RTX A6000, RTX 4090, L40S, H100, ...)"
        )
    if g.architecture == CDNA3:
        return f"{g.display_name} is not an NVIDIA GPU; the trainer needs CUDA"
    return f"{g.id} is not in our GPU table; the trainer needs a known Ampere-or-newer GPU"


def memory_shortfall(base_model: str, memory_gb: int, need: int | None = None) -> str | None:
    """R2: why a card of `memory_gb` cannot train `base_model` at the default sequence length,
    with the memory model's figure, or None when it can. `need` is a storage model's (whole GB,
    from its config.json); a catalogue model's is worked out here, part by part."""
    shape = catalogue_shape(base_model)
    if need is None and shape is not None:
        plan = memory_need(shape)
        if plan.total_gib <= memory_gb:
            return None
        return f"{base_model} needs {plan.explain()}; the GPU has {memory_gb} GB"
    if need is None or need <= memory_gb:
        return None
    return f"{base_model} needs {need} GB of GPU memory; the GPU has {memory_gb} GB"


def ensure_gpu_can_train(
    gpu_type_id: str, gpu_count: int, base_model: str, need_gb: int | None = None
) -> None:
    """R2/P2: `need_gb` is given for a storage model (estimated from its config.json)."""
    reason = ineligible_reason(gpu_type_id)
    if reason:
        raise GpuNotEligible(reason, rule="gpu_architecture", gpu_type_id=gpu_type_id)
    need = need_gb if need_gb is not None else BASE_MODELS.get(base_model)
    if need is None:
        raise UnknownBaseModel(
            f"unknown base model {base_model!r}; choose one of: " + ", ".join(BASE_MODELS),
            rule="base_model",
        )
    # One GPU's memory: the trainer does not shard a model across GPUs, so more GPUs add none.
    have = gpu_type(gpu_type_id).memory_gb
    shortfall = memory_shortfall(base_model, have, need_gb)
    if shortfall is not None:
        raise NotEnoughGpuMemory(
            f"{shortfall} ({gpu_type_id})",
            rule="gpu_memory",
            need_gb=need,
            have_gb=have,
        )


class GpuNotEligible(DomainError):
    problem = "pre-ampere-gpu"
    title = "The GPU cannot run the trainer"


class UnknownBaseModel(DomainError):
    problem = "unknown-base-model"


class NotEnoughGpuMemory(DomainError):
    problem = "gpu-memory-too-small"
    title = "The GPU memory does not cover the model"
