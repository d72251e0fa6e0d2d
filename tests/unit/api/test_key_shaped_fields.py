"""A key pasted into a non-secret field is refused, and never echoed."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from api.schemas.storage import S3StorageIn, VolumeStorageIn

KEYS = [
    "rpa_0123456789ABCDEFGHIJKLMNOPQRSTUV",
    "rps_abcdefgh12345678abcdefgh",
    "AKIAIOSFODNN7EXAMPLE",
    "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
]
VOLUME: dict[str, Any] = {
    "kind": "runpod_volume",
    "volume_id": "nv7eu1ro4k",
    "datacenter_id": "EU-RO-1",
    "access_key_id": "user_x",
    "secret_access_key": "rps_x",
}
S3: dict[str, Any] = {
    "kind": "s3",
    "endpoint_url": "https://s3.example.com",
    "bucket": "my-bucket",
    "region": "us-east-1",
    "access_key_id": "AKIAIOSFODNN7EXAMPLE",
    "secret_access_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
}


@pytest.mark.parametrize("key", KEYS)
def test_keys_in_non_secret_fields_are_refused_without_echo(key: str) -> None:
    cases: list[tuple[type[BaseModel], dict[str, Any], str, str]] = [
        (VolumeStorageIn, VOLUME, "volume_id", key),
        (VolumeStorageIn, VOLUME, "datacenter_id", key),
        (S3StorageIn, S3, "bucket", key),
        (S3StorageIn, S3, "endpoint_url", f"https://s3.example.com/{key}"),
        (S3StorageIn, S3, "region", key),
    ]
    for model, base, field, value in cases:
        with pytest.raises(ValidationError) as refused:
            model.model_validate({**base, field: value})
        errors = refused.value.errors(include_input=False, include_url=False)
        assert any(e["loc"] == (field,) for e in errors), (field, errors)
        assert key.lower() not in str(errors).lower()


def test_the_real_values_pass() -> None:
    VolumeStorageIn.model_validate(VOLUME)
    S3StorageIn.model_validate(S3)
