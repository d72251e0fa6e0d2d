"""`/v1/projects` and dataset versions (P1)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from api.schemas.common import Count, Input, example


class ProjectIn(Input):
    model_config = example(name="support-bot")
    name: Annotated[str, Field(min_length=1, max_length=200)]


class ProjectPublic(BaseModel):
    model_config = example(id="5b7a…", name="support-bot", created_at="2025-01-01T12:00:00Z")
    id: str
    name: str
    created_at: str


class DatasetVersionIn(Input):
    model_config = example(
        name="tickets",
        version="v1",
        object_key="datasets/tickets/v1.jsonl",
        sha256="0" * 64,
    )
    name: Annotated[str, Field(min_length=1, max_length=200)]
    version: Annotated[str, Field(min_length=1, max_length=100)]
    object_key: Annotated[str, Field(min_length=1, max_length=1024)]
    sha256: Annotated[
        str | None,
        Field(
            default=None,
            pattern=r"^[0-9a-f]{64}$",
            description="When sent, the object's sha256 must match it.",
        ),
    ] = None


class DatasetUploadIn(Input):
    model_config = example(name="tickets", version="v2", size_bytes=5 * 1024**3)
    name: Annotated[str, Field(min_length=1, max_length=200)]
    version: Annotated[str, Field(min_length=1, max_length=100)]
    size_bytes: Annotated[Count, Field(ge=1, le=2**53)]


class DatasetUploadPublic(BaseModel):
    upload_url: str
    object_key: str
    expires_at: str


class TokenCountPublic(BaseModel):
    """P1: the dataset's tokens as one base model's tokenizer counts them (the trainer's own
    encoder, cut at `max_seq_len`), counted in the background after a run is drafted with it."""

    model_config = example(
        base_model="storage:models/tiny",
        max_seq_len=2048,
        status="counted",
        tokens=812345,
        trained_tokens=301220,
        examples=5000,
        unavailable=None,
        counted_at="2025-01-01T12:00:05Z",
    )
    base_model: str
    max_seq_len: int
    status: Literal["counted", "unavailable"]
    tokens: int | None = Field(description="Every token the model reads, context included.")
    trained_tokens: int | None = Field(description="The tokens the loss learns from.")
    examples: int | None
    unavailable: str | None = Field(description="Why the tokens could not be counted.")
    counted_at: str


class DatasetVersionPublic(BaseModel):
    model_config = example(
        id="c1d2…",
        project_id="5b7a…",
        name="tickets",
        version="v1",
        object_key="datasets/tickets/v1.jsonl",
        size_bytes=1048576,
        row_count=5000,
        sha256="0" * 64,
        format="chat",
        created_at="2025-01-01T12:00:00Z",
    )
    id: str
    project_id: str
    name: str
    version: str
    object_key: str
    size_bytes: int
    row_count: int
    sha256: str
    format: str = "chat"
    created_at: str
    token_counts: list[TokenCountPublic] = Field(
        default_factory=list,
        description="Per base model a run was drafted with: the dataset's token counts.",
    )
