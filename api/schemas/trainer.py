"""`/v1/trainer/runs`: what the training container reports (R6–R8)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from api.schemas.common import Input
from trainer.protocol import MAX_INT


class Keyed(BaseModel):
    """A report's key: applied once per `(boot, seq)` whichever channel brings it."""

    boot: str | None = Field(default=None, max_length=64)
    seq: int | None = Field(default=None, ge=0, le=MAX_INT)


class TrainerLine(Keyed):
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


class TrainerReport(Input, Keyed):
    time: str | None = Field(default=None, max_length=64)


class TrainerProgress(TrainerReport):
    phase: Literal["installing", "downloading_model", "loading", "training", "exporting"]
    step: int = Field(ge=0, le=MAX_INT)
    total_steps: int = Field(ge=0, le=MAX_INT)
    loss: float | None = Field(default=None, allow_inf_nan=False)
    learning_rate: float | None = Field(default=None, allow_inf_nan=False)
    tokens_per_s: float | None = Field(default=None, allow_inf_nan=False)
    epoch: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    grad_norm: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    eval_loss: float | None = Field(default=None, allow_inf_nan=False)
    bytes_done: int | None = Field(default=None, ge=0)
    bytes_total: int | None = Field(default=None, ge=0)


class TrainerExported(TrainerReport):
    object_key: str = Field(min_length=1, max_length=1024)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    size_bytes: int = Field(ge=0, le=MAX_INT)
    partial: bool = False


class TrainerFailed(TrainerReport):
    reason: str = Field(max_length=100)
    detail: str = Field(default="", max_length=5000)
