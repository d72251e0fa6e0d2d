"""What a run may be configured with: the GPUs RunPod offers now with our eligibility verdict
(R2), and the base models (P2)."""

from __future__ import annotations

from api.deps import Backend, Caller
from api.schemas.gpus import GpuPublic
from domain.base_models import BaseModel
from domain.gpus import BASE_MODELS, UnknownBaseModel, gpu_type, ineligible_reason, memory_shortfall


def gpus(
    *, backend: Backend, caller: Caller, datacenter_id: str | None, base_model: str | None = None
) -> list[GpuPublic]:
    """Eligible offers first, then by price; only those of `datacenter_id` when given. With a
    `base_model`, a GPU whose memory cannot train it on its own is ineligible too, with the
    memory model's figure in the reason."""
    need: int | None = None
    if base_model is not None:
        need = backend.services.base_models.need_gb(caller.org_id, base_model)  # storage models
        if need is None and base_model not in BASE_MODELS:
            raise UnknownBaseModel(
                f"unknown base model {base_model!r}; choose one of: " + ", ".join(BASE_MODELS),
                rule="base_model",
            )
    out = []
    for o in backend.services.connections.gpu_offers(caller.org_id):
        if datacenter_id and datacenter_id.upper() not in o.datacenters:
            continue
        reason = ineligible_reason(o.id)
        if reason is None and base_model is not None:
            memory = gpu_type(o.id, o.memory_gb).memory_gb
            reason = memory_shortfall(base_model, memory, need)
        out.append(
            GpuPublic(
                id=o.id,
                display_name=o.display_name,
                memory_gb=o.memory_gb,
                architecture=gpu_type(o.id, o.memory_gb).architecture,
                eligible=reason is None,
                ineligible_reason=reason,
                price_per_hour=str(o.price_per_hour),
                stock=dict(o.stock),
                datacenters=o.datacenters,
            )
        )
    return sorted(out, key=lambda g: (not g.eligible, g.price_per_hour, g.id))


def base_models(*, backend: Backend, caller: Caller) -> list[BaseModel]:
    """The catalogue and the storage's `models/<folder>`s (`application.base_models`)."""
    return backend.services.base_models.list(caller.org_id)
