"""`/v1/connections`: the compute and storage cards (C1–C5)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from api.schemas.common import Input, example


class ComputeCard(BaseModel):
    model_config = example(
        status="connected",
        account_id="user_2Tns…",
        key_fingerprint="…WXYZ",
        write_permission="unproven",
        balance="250.00",
        spend_per_hour="0.00",
        connected_at="2025-01-01T12:00:00Z",
        rotated_at=None,
    )
    status: Literal["not_connected", "connected"]
    account_id: str | None = None
    key_fingerprint: str | None = None
    write_permission: Literal["unproven", "proven"] = "unproven"
    balance: str | None = None
    spend_per_hour: str | None = None
    connected_at: str | None = None
    rotated_at: str | None = None


class StorageCard(BaseModel):
    model_config = example(
        status="connected",
        kind="runpod_volume",
        volume_id="nv7eu1ro4k",
        datacenter_id="EU-RO-1",
        endpoint_url="https://s3api-eu-ro-1.runpod.io",
        bucket="nv7eu1ro4k",
        region="EU-RO-1",
        access_key_fingerprint="…0001",
        size_gb=100,
        cost_per_month="7.00",
        locked=False,
    )
    status: Literal["not_connected", "connected"]
    kind: Literal["runpod_volume", "s3"] | None = None
    volume_id: str | None = None
    datacenter_id: str | None = None
    endpoint_url: str | None = None
    bucket: str | None = None
    region: str | None = None
    access_key_fingerprint: str | None = None
    size_gb: int | None = None
    cost_per_month: str | None = None
    locked: bool = False


class HubCard(BaseModel):
    """The Hugging Face token (C7): who it belongs to and its fingerprint, never the token."""

    model_config = example(
        status="connected",
        username="alice",
        role="read",
        token_fingerprint="…WXYZ",  # noqa: S106 - a masked example, not a token
        connected_at="2025-01-01T12:00:00Z",
        rotated_at=None,
    )
    status: Literal["not_connected", "connected"]
    username: str | None = None
    role: str | None = None
    token_fingerprint: str | None = None
    connected_at: str | None = None
    rotated_at: str | None = None


class Connections(BaseModel):
    compute: ComputeCard
    storage: StorageCard
    huggingface: HubCard = Field(default_factory=lambda: HubCard(status="not_connected"))


class ApiKeyIn(Input):
    model_config = example(api_key="rpa_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX")
    api_key: Annotated[str, Field(min_length=1, max_length=512)]


class HubTokenIn(Input):
    model_config = example(token="hf_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX")  # noqa: S106 - example
    token: Annotated[str, Field(min_length=1, max_length=512)]


class RegistryCredentialsIn(Input):
    """A private registry's credentials for a baked trainer image (write-only)."""

    model_config = example(username="acme-bot", password="ghp_XXXXXXXXXXXXXXXXXXXX")  # noqa: S106 - an example
    username: Annotated[str, Field(min_length=1, max_length=256, pattern=r"\S")]
    password: Annotated[str, Field(min_length=1, max_length=4096, pattern=r"\S")]


class RegistryCard(BaseModel):
    """What is known of the attached credentials: RunPod's id for them and the secret's last
    four characters; never the secret."""

    model_config = example(attached=True, registry_auth_id="cra_1a2b3c", fingerprint="…XXXX")
    attached: bool
    registry_auth_id: str | None = None
    fingerprint: str | None = None
