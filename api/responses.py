"""JSON bodies serialized once, by the route, as FastAPI itself would (pydantic's `dump_json`).

A route that returns a model lets FastAPI validate it again against `response_model` and, for a
plain `def` route, does that in one more threadpool hand-off before serializing: under load the
hand-off costs more than the work (bench/api_load.py, profiled). A route that already built its
models returns `json_response(...)` instead; the bytes, the status and the `content-type` are the
ones FastAPI's own fast path (TypeAdapter.dump_json, by alias) produces. The route keeps
`response_model=` for the API document.
"""

from __future__ import annotations

from typing import Any

from fastapi import Response
from pydantic import TypeAdapter

_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def json_response(shape: Any, content: Any, status_code: int = 200) -> Response:
    """`content` (already validated instances of `shape`, e.g. `list[RunPublic]`) as JSON."""
    adapter = _ADAPTERS.get(shape)
    if adapter is None:
        adapter = _ADAPTERS.setdefault(shape, TypeAdapter(shape))
    body = adapter.dump_json(content, by_alias=True)
    return Response(body, status_code=status_code, media_type="application/json")
