"""`GET /v1/me` and `GET /v1/organization` (A1, S7)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from api.schemas.common import example


class Me(BaseModel):
    model_config = example(
        user_id="2f1c…", email="owner@example.com", organization_id="8d0e…", role="owner"
    )
    user_id: str
    email: str
    organization_id: str
    role: Literal["owner", "member", "auditor", "finance"]


class Capabilities(BaseModel):
    training: bool
    managed_serving: bool


class OrganizationPublic(BaseModel):
    model_config = example(
        id="8d0e…",
        name="Acme",
        mode="own",
        capabilities={"training": True, "managed_serving": True},
    )
    id: str
    name: str
    mode: Literal["own", "provided"]
    capabilities: Capabilities
