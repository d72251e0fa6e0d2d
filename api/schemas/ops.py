"""`/healthz` and `/readyz` (O3)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class Health(BaseModel):
    status: str
    checks: dict[str, str] = Field(default_factory=dict)
