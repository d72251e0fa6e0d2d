"""`GET /v1/gpus`: the catalog with our eligibility verdict (R2)."""

from __future__ import annotations

from pydantic import BaseModel

from api.schemas.common import example


class GpuPublic(BaseModel):
    model_config = example(
        id="NVIDIA A100 80GB PCIe",
        display_name="A100 PCIe",
        memory_gb=80,
        architecture="ampere",
        eligible=True,
        ineligible_code=None,
        ineligible_reason=None,
        price_per_hour="1.64",
        stock={"EU-RO-1": "High"},
        datacenters=["EU-RO-1"],
    )
    id: str
    display_name: str
    memory_gb: int
    architecture: str
    eligible: bool
    # Why not, as a stable code: `pre-ampere-gpu` (the architecture cannot train) or
    # `no-cuda13-hosts` (in this datacenter RunPod has it only on hosts older than CUDA 13).
    ineligible_code: str | None = None
    ineligible_reason: str | None
    price_per_hour: str
    stock: dict[str, str]
    datacenters: list[str]
