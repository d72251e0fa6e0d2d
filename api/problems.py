"""RFC 9457 problem+json: the one place errors become HTTP responses (routes have no try/except)."""

from __future__ import annotations

import logging
from typing import Any

from eventsourcing.persistence import IntegrityError
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from domain.errors import TensorantError

PROBLEM_BASE = "https://tensorant.dev/problems/"
MEDIA_TYPE = "application/problem+json"
log = logging.getLogger("tensorant.api")


class Unauthenticated(TensorantError):
    problem = "unauthenticated"
    status = 401
    title = "A valid bearer token is required"


class InvalidRequest(TensorantError):
    """A parameter the schema cannot express (a header's shape, a calendar edge): like a
    schema violation, a `validation-error`."""

    problem = "validation-error"
    status = 422
    title = "The request is not valid"


class ViewsBehind(TensorantError):
    """The command was recorded but the views did not catch up in time (retry the GET)."""

    problem = "views-behind"
    status = 503
    title = "The change is recorded but not yet visible"


_HTTP_SLUGS = {404: "not-found", 405: "method-not-allowed", 401: "unauthenticated"}
_RESERVED = {"type", "title", "status", "detail", "instance"}


def problem_type(slug: str) -> str:
    return PROBLEM_BASE + slug


def problem_response(
    status: int,
    slug: str,
    title: str,
    detail: str,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": problem_type(slug),
        "title": title,
        "status": status,
        "detail": detail,
    }
    body.update({k: v for k, v in extra.items() if k not in _RESERVED})
    return JSONResponse(body, status_code=status, media_type=MEDIA_TYPE, headers=headers)


def _tensorant_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, TensorantError)
    recorded = getattr(exc, "position", 0)
    container = getattr(request.app.state, "container", None)
    if recorded and container is not None:
        # A refusal that was recorded (LaunchRejected, ConnectionCheckFailed, ...) is visible
        # to the next GET, like any other write.
        container.wait_for(recorded)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        headers = {**(headers or {}), "Retry-After": str(int(retry_after))}
    return problem_response(
        exc.status, exc.problem, exc.title, exc.detail, headers, **_jsonable(exc.extra)
    )


def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    # Never echo `input`: a key pasted in the wrong place would come back in the response (C6).
    errors = [
        {"loc": list(e.get("loc", ())), "msg": str(e.get("msg", "")), "type": str(e.get("type"))}
        for e in exc.errors()
    ]
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    where = ".".join(str(p) for p in first["loc"] if p != "body") or "request"
    return problem_response(
        422,
        "validation-error",
        "The request is not valid",
        f"{where}: {first['msg']}",
        errors=errors,
    )


def _http_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    if isinstance(exc.__cause__, RecursionError):  # N6: FastAPI's parse of a deep JSON body
        return problem_response(
            422,
            "validation-error",
            "The request is not valid",
            "body: the JSON is nested too deeply to read",
            errors=[{"loc": ["body"], "msg": "nested too deeply", "type": "json_too_deep"}],
        )
    slug = _HTTP_SLUGS.get(exc.status_code, "http-error")
    return problem_response(
        exc.status_code, slug, str(exc.detail), str(exc.detail), dict(exc.headers or {}) or None
    )


def _concurrent(request: Request, exc: Exception) -> JSONResponse:
    """Optimistic concurrency: another command changed the same aggregate first."""
    return problem_response(
        409,
        "concurrent-change",
        "Changed by another request at the same moment",
        "another request changed the same object first; nothing of yours was saved — retry",
    )


def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.error(
        "unhandled %s on %s %s (request %s)",
        type(exc).__name__,
        request.method,
        request.url.path,
        getattr(request.state, "request_id", "-"),
    )
    return problem_response(
        500,
        "internal-error",
        "Internal error",
        "the server failed; the error is logged with this request's id",
        request_id=getattr(request.state, "request_id", None),
    )


def _jsonable(extra: dict[str, object]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in extra.items():
        out[k] = v if isinstance(v, str | int | float | bool | list | dict | type(None)) else str(v)
    return out


def install(app: FastAPI) -> None:
    app.add_exception_handler(TensorantError, _tensorant_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(IntegrityError, _concurrent)
    app.add_exception_handler(Exception, _unexpected)
