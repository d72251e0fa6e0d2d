"""Where money or consent is at stake nothing is coerced."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import Api, problem
from tests.e2e.flows import draft, ready


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("price_limit_per_hour", "1_000"),
        ("price_limit_per_hour", "1e3"),
        ("price_limit_per_hour", " 2.00"),
        ("price_limit_per_hour", "NaN"),
        ("price_limit_per_hour", True),
        ("gpu_count", "1"),
        ("gpu_count", 1.0),
        ("gpu_count", True),
        ("max_runtime_minutes", "60"),
    ],
)
def test_a_draft_refuses_coerced_money_and_counts(
    api: Api, creds: dict[str, Any], field: str, value: Any
) -> None:
    org, config = ready(api, creds)
    problem(org.member.post("/v1/runs", json={**config, field: value}), 422, "validation-error")
    # Plain notation, as a string or a number, still passes.
    assert (
        org.member.post("/v1/runs", json={**config, "price_limit_per_hour": 2.5}).status_code == 201
    )


def test_consent_is_json_true_only(api: Api, creds: dict[str, Any]) -> None:
    org, config = ready(api, creds)
    run = draft(org, config)
    for confirm in ("yes", "true", 1, "1"):
        r = org.member.post(
            f"/v1/runs/{run['id']}/launch",
            json={"confirm": confirm, "accepted_price_per_hour": "1.64"},
        )
        problem(r, 422, "validation-error")
    r = org.member.post(
        f"/v1/runs/{run['id']}/launch", json={"confirm": True, "accepted_price_per_hour": "1_000"}
    )
    problem(r, 422, "validation-error")
    problem(
        org.member.post("/v1/cleanup/orphans/nope/release", json={"confirm": "yes"}),
        422,
        "validation-error",
    )
    assert org.member.get(f"/v1/runs/{run['id']}").json()["state"] == "draft"
