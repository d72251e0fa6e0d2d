"""Request and response models of the v1 API (field names are fixed by API.md)."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class Input(BaseModel):
    """Request bodies: no control characters in any text (PostgreSQL cannot even store NUL)."""

    @model_validator(mode="before")
    @classmethod
    def _printable(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for key, value in data.items():
                if isinstance(value, str) and _CONTROL.search(value):
                    raise ValueError(f"{key} contains control characters")
        return data


def _example(**example: Any) -> ConfigDict:
    return ConfigDict(json_schema_extra={"examples": [example]})


class Problem(BaseModel):
    """RFC 9457 problem details; extra members depend on the type."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "type": "https://tensorant.dev/problems/invalid-key",
                    "title": "RunPod rejected the API key",
                    "status": 422,
                    "detail": "RunPod rejected the API key (HTTP 401): check that it is current",
                }
            ]
        },
    )
    type: str
    title: str
    status: int
    detail: str


# ---------------------------------------------------------------- identity


class Me(BaseModel):
    model_config = _example(
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
    model_config = _example(
        id="8d0e…",
        name="Acme",
        mode="own",
        capabilities={"training": True, "managed_serving": True},
    )
    id: str
    name: str
    mode: Literal["own", "provided"]
    capabilities: Capabilities


# ---------------------------------------------------------------- connections


class ComputeCard(BaseModel):
    model_config = _example(
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
    model_config = _example(
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


class Connections(BaseModel):
    compute: ComputeCard
    storage: StorageCard


class ApiKeyIn(Input):
    model_config = _example(api_key="rpa_XXXXXXXXXXXXXXXXXXXXXXXXXXXXXXXX")
    api_key: Annotated[str, Field(min_length=1, max_length=512)]


class VolumePublic(BaseModel):
    model_config = _example(
        id="nv7eu1ro4k",
        name="tensorant-eu-ro-1",
        size_gb=100,
        datacenter_id="EU-RO-1",
        s3_api=True,
    )
    id: str
    name: str
    size_gb: int
    datacenter_id: str
    s3_api: bool


class VolumeStorageIn(Input):
    model_config = _example(
        kind="runpod_volume",
        volume_id="nv7eu1ro4k",
        datacenter_id="EU-RO-1",
        access_key_id="user_…",
        secret_access_key="rps_…",  # noqa: S106 - an example
    )
    kind: Literal["runpod_volume"]
    volume_id: Annotated[str, Field(min_length=1, max_length=128)]
    datacenter_id: Annotated[str, Field(min_length=1, max_length=64)]
    access_key_id: Annotated[str, Field(min_length=1, max_length=512)]
    secret_access_key: Annotated[str, Field(min_length=1, max_length=512)]
    size_gb: Annotated[int | None, Field(ge=1, le=4000)] = None


class S3StorageIn(Input):
    model_config = _example(
        kind="s3",
        endpoint_url="https://s3.example.com",
        bucket="my-bucket",
        region="us-east-1",
        access_key_id="AKIA…",
        secret_access_key="…",  # noqa: S106
    )
    kind: Literal["s3"]
    endpoint_url: Annotated[str, Field(min_length=1, max_length=2048)]
    bucket: Annotated[str, Field(min_length=1, max_length=255)]
    region: Annotated[str, Field(min_length=1, max_length=64)]
    access_key_id: Annotated[str, Field(min_length=1, max_length=512)]
    secret_access_key: Annotated[str, Field(min_length=1, max_length=512)]


StorageIn = Annotated[VolumeStorageIn | S3StorageIn, Field(discriminator="kind")]


class StorageRotateIn(Input):
    model_config = _example(access_key_id="user_…", secret_access_key="rps_…")  # noqa: S106
    access_key_id: Annotated[str, Field(min_length=1, max_length=512)]
    secret_access_key: Annotated[str, Field(min_length=1, max_length=512)]


class ResizeIn(Input):
    model_config = _example(size_gb=200)
    size_gb: Annotated[int, Field(ge=1, le=100_000)]


# ---------------------------------------------------------------- projects


class ProjectIn(Input):
    model_config = _example(name="support-bot")
    name: Annotated[str, Field(min_length=1, max_length=200)]


class ProjectPublic(BaseModel):
    model_config = _example(id="5b7a…", name="support-bot", created_at="2025-01-01T12:00:00Z")
    id: str
    name: str
    created_at: str


class DatasetVersionIn(Input):
    model_config = _example(
        name="tickets",
        version="v1",
        object_key="datasets/tickets/v1.jsonl",
        size_bytes=1048576,
        row_count=5000,
        sha256="0" * 64,
    )
    name: Annotated[str, Field(min_length=1, max_length=200)]
    version: Annotated[str, Field(min_length=1, max_length=100)]
    object_key: Annotated[str, Field(min_length=1, max_length=1024)]
    size_bytes: Annotated[int, Field(ge=1, le=2**53)]
    row_count: Annotated[int, Field(ge=0, le=2**53)]
    sha256: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class DatasetVersionPublic(BaseModel):
    model_config = _example(
        id="c1d2…",
        project_id="5b7a…",
        name="tickets",
        version="v1",
        object_key="datasets/tickets/v1.jsonl",
        size_bytes=1048576,
        row_count=5000,
        sha256="0" * 64,
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
    created_at: str


class GpuPublic(BaseModel):
    model_config = _example(
        id="NVIDIA A100 80GB PCIe",
        display_name="A100 PCIe",
        memory_gb=80,
        architecture="ampere",
        eligible=True,
        ineligible_reason=None,
        price_per_hour="1.64",
        stock={"EU-RO-1": "High"},
        datacenters=["EU-RO-1"],
    )
    id: str
    display_name: str
    memory_gb: int
    architecture: str
    eligible: bool
    ineligible_reason: str | None
    price_per_hour: str
    stock: dict[str, str]
    datacenters: list[str]


class Health(BaseModel):
    status: str
    checks: dict[str, str] = Field(default_factory=dict)
