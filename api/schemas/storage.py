"""`/v1/storage`: discovered volumes, binding, rotation, resizing (S1–S6)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field

from api.schemas.common import Count, Input, NotASecret, example


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
    volume_id: Annotated[str, Field(min_length=1, max_length=128), NotASecret]
    datacenter_id: Annotated[str, Field(min_length=1, max_length=64), NotASecret]
    access_key_id: Annotated[str, Field(min_length=1, max_length=512)]
    secret_access_key: Annotated[str, Field(min_length=1, max_length=512)]
    size_gb: Annotated[Count | None, Field(ge=1, le=4000)] = None


# The S3 rules, checked before any client is built (botocore would raise on some, and a
# bucket that cannot exist should not cost a round trip).
_REGION = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_IP = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")


def s3_bucket(value: str) -> str:
    """General-purpose bucket naming rules (AWS S3 user guide, 'Bucket naming rules')."""
    if not _BUCKET.match(value):
        raise ValueError(
            "a bucket name is 3-63 lowercase letters, digits, dots and hyphens, "
            "beginning and ending with a letter or digit"
        )
    if ".." in value or ".-" in value or "-." in value:
        raise ValueError("a bucket name has no two adjacent dots, nor a dot next to a hyphen")
    if _IP.match(value):
        raise ValueError("a bucket name is not an IP address")
    if value.startswith(("xn--", "sthree-", "amzn-s3-demo-")) or value.endswith(
        ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
    ):
        raise ValueError("a bucket name does not use a prefix or suffix S3 reserves")
    return value


def s3_region(value: str) -> str:
    if not _REGION.match(value):
        raise ValueError("a region is letters, digits and inner hyphens, such as us-east-1")
    return value


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
    endpoint_url: Annotated[str, Field(min_length=1, max_length=2048), NotASecret]
    bucket: Annotated[
        str, Field(min_length=3, max_length=63), NotASecret, AfterValidator(s3_bucket)
    ]
    region: Annotated[
        str, Field(min_length=1, max_length=63), NotASecret, AfterValidator(s3_region)
    ]
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
