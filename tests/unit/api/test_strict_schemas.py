"""Strict consent, money and counts."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from pydantic import ValidationError

from api.schemas.cleanup import OrphanReleaseIn
from api.schemas.projects import DatasetUploadIn
from api.schemas.runs import LaunchIn, ReleaseIn, ResumeIn, RunCreate
from api.schemas.storage import ResizeIn

RUN: dict[str, Any] = {
    "project_id": "p",
    "dataset_version_id": "d",
    "kind": "trial",
    "base_model": "m",
    "gpu_type_id": "g",
    "gpu_count": 1,
    "price_limit_per_hour": "2.00",
    "max_runtime_minutes": 60,
}


@pytest.mark.parametrize(
    "value",
    ["1_000", "1e3", "1E3", " 2", "2 ", "NaN", "Infinity", "", True, [], "0x10", "+2", "2."],
)
def test_prices_in_plain_notation_only(value: Any) -> None:
    with pytest.raises(ValidationError):
        RunCreate.model_validate({**RUN, "price_limit_per_hour": value})
    with pytest.raises(ValidationError):
        LaunchIn.model_validate({"confirm": True, "accepted_price_per_hour": value})


@pytest.mark.parametrize(
    ("value", "expected"), [("2.50", "2.50"), (2.5, "2.5"), (2, "2"), ("0.000001", "0.000001")]
)
def test_plain_prices_pass(value: Any, expected: str) -> None:
    assert RunCreate.model_validate(
        {**RUN, "price_limit_per_hour": value}
    ).price_limit_per_hour == Decimal(expected)


@pytest.mark.parametrize("value", ["1", 1.0, True, "one"])
def test_counts_are_integers(value: Any) -> None:
    for field in ("gpu_count", "max_runtime_minutes"):
        with pytest.raises(ValidationError):
            RunCreate.model_validate({**RUN, field: value})
    with pytest.raises(ValidationError):
        ResizeIn.model_validate({"size_gb": value})
    with pytest.raises(ValidationError):
        # P1: the server counts a registered dataset itself; a presigned upload declares its size.
        DatasetUploadIn.model_validate({"name": "n", "version": "1", "size_bytes": value})


@pytest.mark.parametrize("value", ["yes", "true", 1, "1", "on", None])
def test_consent_is_json_true(value: Any) -> None:
    for model, field in (
        (LaunchIn, "confirm"),
        (ResumeIn, "confirm_billing"),
        (ReleaseIn, "confirm_delete_unverified"),
        (OrphanReleaseIn, "confirm"),
    ):
        with pytest.raises(ValidationError):
            model.model_validate({field: value})
        assert getattr(model.model_validate({field: True}), field) is True
