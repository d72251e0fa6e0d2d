"""Responses every authenticated route documents (all problem+json)."""

from __future__ import annotations

from typing import Any

from api.schemas import Problem


def problems(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": Problem, "content": {"application/problem+json": {}}} for code in codes}


# 401 no/invalid token, 403 role, 404 unknown or foreign id, 422 invalid body or rule,
# 409 state conflict, 503 RunPod unreachable or views behind.
AUTHENTICATED = problems(401, 403, 404, 409, 422, 503)
