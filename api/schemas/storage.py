"""`/v1/storage`: discovered volumes, binding, rotation, resizing (S1–S6)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field

from api.schemas.common import Count, Input, example


class VolumePublic(BaseModel):
    model_config = example(
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
    model_config = example(
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
    size_gb: Annotated[Count | None, Field(ge=1, le=4000)] = None


class S3StorageIn(Input):
    model_config = example(
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
    model_config = example(access_key_id="user_…", secret_access_key="rps_…")  # noqa: S106
    access_key_id: Annotated[str, Field(min_length=1, max_length=512)]
    secret_access_key: Annotated[str, Field(min_length=1, max_length=512)]


class ResizeIn(Input):
    model_config = example(size_gb=200)
    size_gb: Annotated[Count, Field(ge=1, le=100_000)]
