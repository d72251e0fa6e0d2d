"""Deployments (V1) and their chat route (V2)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class DeploymentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str = Field(min_length=1, max_length=64)


class DeploymentUsage(BaseModel):
    """What the deployment's chat route forwarded (V2), counted beside the log."""

    requests: int = Field(default=0, description="chat requests sent to the endpoint")
    prompt_tokens: int = Field(default=0, description="from the answers' OpenAI `usage`")
    completion_tokens: int = Field(
        default=0,
        description="from the answers' `usage` (a stream's last chunk; counted as content "
        "chunks when a worker sends none)",
    )
    errors: int = Field(default=0, description="requests the endpoint answered 4xx or 5xx")
    cold_starts: int = Field(
        default=0, description="requests no worker answered within SERVING_COLD_START_S (503)"
    )


class DeploymentPublic(BaseModel):
    id: str
    run_id: str
    state: str = Field(description="deploying | ready | failed | deleting | deleted")
    base_model: str
    served_model: str = Field(description="the worker's MODEL_NAME")
    adapter_name: str = Field(description="the adapter's folder in the serving directory")
    adapter_sha256: str
    endpoint_name: str = Field(description="deterministic per organization and base model")
    endpoint_id: str | None
    failed_reason: str | None
    endpoint_cost: str = Field(
        description="USD RunPod billed for the endpoint(s) this deployment used, from its hourly "
        "records (an endpoint shared by a base model's deployments is one cost)"
    )
    chat_url: str = Field(description="POST an OpenAI chat completion here")
    usage: DeploymentUsage
    created_at: str
    updated_at: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str = Field(min_length=1, max_length=32)
    content: str = Field(max_length=100_000)


class ChatIn(BaseModel):
    """An OpenAI chat completion request; `model` is ignored (the deployment names the adapter)."""

    model_config = ConfigDict(extra="allow")

    messages: list[ChatMessage] = Field(min_length=1, max_length=256)
    model: str | None = None
    stream: bool = False
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1, le=8192)

    def upstream(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)
