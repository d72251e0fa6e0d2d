"""What a run may be configured with: the GPUs RunPod offers now with our eligibility verdict
(R2), and the base models (P2)."""

from __future__ import annotations

from api.actions import connections
from api.deps import Backend, Caller
from api.schemas.gpus import GpuPublic
from application.ports import GpuOffer
from domain.base_models import BaseModel
from domain.gpus import (
    BASE_MODELS,
    GpuNotEligible,
    NotEnoughGpuMemory,
    UnknownBaseModel,
    gpu_type,
    ineligible_reason,
    memory_shortfall,
)
from domain.run_config import NoCuda13Hosts
from domain.storage import RUNPOD_VOLUME


def gpus(
    *, backend: Backend, caller: Caller, datacenter_id: str | None, base_model: str | None = None
) -> list[GpuPublic]:
    """Eligible offers first, then by price; only those of `datacenter_id` when given.

    A type RunPod has only on hosts older than CUDA 13 is ineligible (`no-cuda13-hosts`): in
    `datacenter_id`, else in the organization's network volume's datacenter, else everywhere
    it is in stock. With a `base_model`, a GPU whose memory cannot train it on its own is
    ineligible too, with the memory model's figure in the reason."""
    need: int | None = None
    if base_model is not None:
        need = backend.services.base_models.need_gb(caller.org_id, base_model)  # storage models
        if need is None and base_model not in BASE_MODELS:
            raise UnknownBaseModel(
                f"unknown base model {base_model!r}; choose one of: " + ", ".join(BASE_MODELS),
                rule="base_model",
            )
    where = datacenter_id.upper() if datacenter_id else _volume_datacenter(backend, caller)
    out = []
    for o in backend.services.connections.gpu_offers(caller.org_id):
        if datacenter_id and where not in o.datacenters and where not in o.no_cuda13:
            continue
        code, reason = _ineligible(o, where)
        if reason is None and base_model is not None:
            memory = gpu_type(o.id, o.memory_gb).memory_gb
            reason = memory_shortfall(base_model, memory, need)
            code = NotEnoughGpuMemory.problem if reason is not None else None
        out.append(
            GpuPublic(
                id=o.id,
                display_name=o.display_name,
                memory_gb=o.memory_gb,
                architecture=gpu_type(o.id, o.memory_gb).architecture,
                eligible=reason is None,
                ineligible_code=code,
                ineligible_reason=reason,
                price_per_hour=str(o.price_per_hour),
                stock=dict(o.stock),
                datacenters=o.datacenters,
            )
        )
    return sorted(out, key=lambda g: (not g.eligible, g.price_per_hour, g.id))


def _volume_datacenter(backend: Backend, caller: Caller) -> str | None:
    card = connections.storage_card(views=backend.views, org_id=caller.org_id)
    return card.datacenter_id if card.kind == RUNPOD_VOLUME and card.datacenter_id else None


def _ineligible(offer: GpuOffer, where: str | None) -> tuple[str | None, str | None]:
    """(code, sentence) of why the type cannot train here, or (None, None)."""
    reason = ineligible_reason(offer.id)
    if reason is not None:
        return GpuNotEligible.problem, reason
    if where is not None and where in offer.no_cuda13:
        return NoCuda13Hosts.problem, (
            f"no host of {offer.display_name} in {where} runs CUDA 13 or newer, which the "
            "trainer needs; choose another GPU"
        )
    if where is None and offer.no_cuda13 and not offer.datacenters:
        return NoCuda13Hosts.problem, (
            f"no host of {offer.display_name} in stock runs CUDA 13 or newer, which the "
            "trainer needs; choose another GPU"
        )
    return None, None


def base_models(*, backend: Backend, caller: Caller) -> list[BaseModel]:
    """The catalogue and the storage's `models/<folder>`s (`application.base_models`)."""
    return backend.services.base_models.list(caller.org_id)
