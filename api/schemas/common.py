"""What every request and response shares: printable input, examples, problem+json."""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

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


def example(**values: Any) -> ConfigDict:
    """A model's example in the OpenAPI document."""
    return ConfigDict(json_schema_extra={"examples": [values]})


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


def problem_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The problem+json responses a route documents."""
    return {code: {"model": Problem, "content": {"application/problem+json": {}}} for code in codes}


# 401 no/invalid token, 403 role, 404 unknown or foreign id, 422 invalid body or rule,
# 409 state conflict, 503 RunPod unreachable or views behind.
AUTHENTICATED = problem_responses(401, 403, 404, 409, 422, 503)
