"""`/v1/trainer/runs`: what the training container reports (R6–R8)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from api.schemas.common import Input


class TrainerLine(BaseModel):
    time: str | None = Field(default=None, max_length=64)
    text: str = Field(max_length=10_000)

    @field_validator("text")
    @classmethod
    def _storable(cls, value: str) -> str:
        """Container output may hold anything; NUL cannot be stored, so it is replaced."""
        return value.replace("\x00", "\ufffd")


class TrainerLogs(BaseModel):
    lines: list[TrainerLine] = Field(max_length=1000)
    batch: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9._:-]{1,64}$",
        description="The sender's id for this batch (a UUID): a retried batch is stored once.",
    )


class TrainerProgress(Input):
    phase: Literal["training", "exporting"]
    step: int = Field(ge=0)
    total_steps: int = Field(ge=0)


class TrainerExported(Input):
    object_key: str = Field(min_length=1, max_length=1024)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size_bytes: int = Field(ge=0)


class TrainerFailed(Input):
    reason: str = Field(max_length=100)
    detail: str = Field(default="", max_length=5000)
