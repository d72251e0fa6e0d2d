"""`/v1/webhooks` (R20): endpoints, and what was delivered to each."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from api.schemas.common import Input, example

EventType = Literal["run.state_changed", "pod.still_billing", "cleanup.needs_manual", "balance.low"]


class WebhookIn(Input):
    model_config = example(url="https://hooks.example.com/tensorant", events=["run.state_changed"])
    url: Annotated[str, Field(min_length=1, max_length=2000)]
    events: Annotated[
        list[EventType],
        Field(
            default_factory=list,
            max_length=10,
            description="What to deliver; empty or absent: every type.",
        ),
    ]


class WebhookPublic(BaseModel):
    model_config = example(
        id="0f3c…",
        url="https://hooks.example.com/tensorant",
        events=["run.state_changed"],
        created_at="2026-12-01T12:00:00Z",
    )
    id: str
    url: str
    events: list[str]
    created_at: str


class WebhookCreated(WebhookPublic):
    secret: str = Field(
        description="The signing secret, shown this once (docs/webhooks.md says how to verify)."
    )


class DeliveryAttempt(BaseModel):
    at: str
    status_code: int | None
    error: str | None
    duration_ms: int


class DeliveryPublic(BaseModel):
    id: str
    event_id: str
    type: str
    status: Literal["pending", "delivered", "failed", "cancelled"]
    attempts: int
    last_status_code: int | None
    last_error: str | None
    next_attempt_at: str | None
    delivered_at: str | None
    payload: dict[str, Any]
    attempt_log: list[DeliveryAttempt]


class DeliveryList(BaseModel):
    deliveries: list[DeliveryPublic]
