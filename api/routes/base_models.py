"""The base models a run can train (P2): the catalogue and the organization's storage models."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from api.actions import catalogue
from api.deps import BackendDep, Reader
from api.schemas.common import AUTHENTICATED

router = APIRouter(prefix="/v1/base-models", tags=["base-models"], responses=AUTHENTICATED)


class BaseModelPublic(BaseModel):
    id: str
    source: str  # hub | storage
    parameters_b: float
    lora_memory_gb: int
    context_length: int
    license: str
    gated: bool


@router.get("", response_model=list[BaseModelPublic])
def base_models(caller: Reader, backend: BackendDep) -> list[BaseModelPublic]:
    """The catalogue (Hugging Face Hub models; gated ones are refused at draft) plus every
    `models/<folder>` with a config.json on the organization's storage, as
    `storage:models/<folder>`, its memory need estimated from the config."""
    found = catalogue.base_models(backend=backend, caller=caller)
    return [BaseModelPublic(**m.to_json()) for m in found]
