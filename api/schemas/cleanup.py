"""`/v1/cleanup`: what bills or may bill, and releasing orphans (K1–K3)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from api.schemas.common import Confirmation, Input


class CleanupItem(BaseModel):
    kind: Literal[
        "running",
        "retained",
        "terminating",
        "needs_manual",
        "orphan",
        "serving_endpoint",
        "orphan_endpoint",
    ]
    pod_id: str | None
    endpoint_id: str | None = None  # *_endpoint: the RunPod Serverless endpoint (V3)
    run_id: str | None
    run_state: str | None = None
    since: str | None
    cost_so_far: str
    storage_cost_per_hour: str
    price_per_hour: str | None = None
    attempts: int
    last_error: str | None
    pod_status: str | None = None  # orphans: orphan | terminating | needs_manual
    pod_name: str | None = None  # *_endpoint: the endpoint's name
    workers_up: int | None = None  # *_endpoint: workers running, idle or starting (V3)
    workers_min: int | None = None  # *_endpoint: the minimum RunPod keeps up
    warning: str | None = None  # e.g. the run is stalled


class OrphanReleaseIn(Input):
    confirm: Confirmation = False


class CleanupPublic(BaseModel):
    items: list[CleanupItem]
    balance_warning: str | None
    balance: str | None = None
    spend_per_hour: str | None = None
