"""What every request and response shares: printable input, examples, problem+json."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Strict,
    WithJsonSchema,
    model_validator,
)

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


_PLAIN_NUMBER = re.compile(r"^-?[0-9]{1,30}(\.[0-9]{1,30})?$")


def _plain_decimal(value: Any) -> Any:
    """Money is a JSON string or number in plain notation: `"2.50"`, `2.5`, `2`.

    Refused: booleans, `"1_000"`, `"1e3"`, `" 2"`, `"NaN"`, `"Infinity"` (Python's Decimal
    would coerce several of these, and a price is where coercion costs money).
    """
    if isinstance(value, bool):
        raise ValueError("must be a decimal number, not a boolean")
    if isinstance(value, int):
        return Decimal(value)
    if isinstance(value, float):
        text = repr(value)
        if not _PLAIN_NUMBER.match(text):
            raise ValueError("must be a finite decimal number in plain notation")
        return Decimal(text)
    if isinstance(value, str):
        if not _PLAIN_NUMBER.match(value):
            raise ValueError('must be a decimal number in plain notation, such as "2.50"')
        return Decimal(value)
    if isinstance(value, Decimal):
        return value
    raise ValueError("must be a decimal string or number")


PlainDecimal = Annotated[
    Decimal,
    BeforeValidator(_plain_decimal),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number"},
                {"type": "string", "pattern": _PLAIN_NUMBER.pattern, "examples": ["2.50"]},
            ]
        }
    ),
]
"""Prices and limits: a decimal string or a JSON number in plain notation, nothing coerced."""

_KEY_SHAPED = re.compile(
    r"(?:rpa_|rps_|tnt_|user_)[A-Za-z0-9]{8,}"  # RunPod API and S3 keys, our member tokens
    r"|A[KS]IA[0-9A-Z]{16}"  # AWS access key ids
    r"|[A-Za-z0-9+/=_-]{32,}"  # any long high-entropy run (a secret access key)
)


def not_a_secret(value: str) -> str:
    """Non-secret fields (bucket, endpoint, volume id, ...) are stored and shown: a credential
    pasted there is refused, and never echoed (the error names the field only)."""
    if _KEY_SHAPED.search(value):
        raise ValueError(
            "looks like a credential: keys go in access_key_id / secret_access_key only"
        )
    return value


NotASecret = AfterValidator(not_a_secret)

MAX_CURSOR = 2**63 - 1
"""Positions, sequence numbers and cursors are 64-bit signed in every store."""

Confirmation = Annotated[bool, Strict()]
"""Consent is JSON `true` (or `false`): `"yes"`, `1` or `"true"` are refused."""

Count = Annotated[int, Strict()]
"""Counts are JSON integers: `"1"`, `1.0` and `true` are refused."""


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
