"""RunPod's answers translated into our errors, once for both wires, with key material scrubbed.

GraphQL refuses with `errors[0].message` texts (the SDK's QueryError); REST v2 with problem+json
whose `detail` carries no machine code. Both are classified here by the same word lists, so a
capacity, balance or permission refusal means the same thing whichever wire carried it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from application.errors import (
    CapacityUnavailable,
    InsufficientBalance,
    InsufficientPermissions,
    InvalidCredentials,
    ProviderError,
    ProviderUnavailable,
)

READ_ONLY_DETAIL = "read-only key: it cannot launch or clean up Pods"
INVALID_KEY_DETAIL = "RunPod rejected the API key (HTTP 401): check that it is current"
RESUME_NO_GPUS_DETAIL = (
    "the stopped Pod's machine has no free GPUs now, so it cannot be resumed; it stays stopped "
    "with its files (try again later)"
)
NO_CAPACITY_DETAIL = "RunPod has no machine with the requested GPU type and count right now: "

_RESUME_CAPACITY = ("not enough free gpus",)
_CAPACITY = ("no longer any instances available", "no capacity", "no instances")
_BALANCE = ("balance", "credit", "spend limit", "insufficient funds")
_TRANSIENT = (
    "something went wrong",
    "too many requests",
    "rate limit",
    "try again later",
    "internal server error",
    "service unavailable",
    "timed out",
    "timeout",
)
# The only GraphQL texts that say "this key may not do that" (RunPod answers an under-privileged
# key with HTTP 200 + "Unauthorized"); anything else is not read as a permission verdict.
_UNAUTHORIZED = ("unauthorized", "forbidden")


class ApiRetired(ProviderError):
    """RunPod answered 404/410 for a whole API (GraphQL after its retirement, early 2027)."""


def redact(text: str, api_key: str | None) -> str:
    """`text` without the key (or any long tail of it), so no error or log can leak it."""
    if api_key and len(api_key) >= 4:
        text = text.replace(api_key, "[redacted]")
        # A server could echo a truncated key; the last 12 characters identify it too well.
        if len(api_key) > 12:
            text = text.replace(api_key[-12:], "[redacted]")
    return text


def unavailable(
    detail: str, api_key: str | None, retry_after_s: float | None = None
) -> ProviderUnavailable:
    if retry_after_s is None:
        return ProviderUnavailable(redact(detail, api_key))
    return ProviderUnavailable(redact(detail, api_key), retry_after_s=retry_after_s)


def invalid_credentials() -> InvalidCredentials:
    return InvalidCredentials(INVALID_KEY_DETAIL)


def rate_limited(exc: BaseException) -> bool:
    """A refusal RunPod did not process (REST v2's 429): repeat it, nothing to look for."""
    return bool((getattr(exc, "extra", None) or {}).get("rate_limited"))


def _refusal(text: str) -> ProviderError | None:
    """Capacity or money, by the words RunPod uses on either API; None for anything else."""
    low = text.lower()
    if any(s in low for s in _RESUME_CAPACITY):
        return CapacityUnavailable(RESUME_NO_GPUS_DETAIL, provider_message=text)
    if any(s in low for s in _CAPACITY):
        return CapacityUnavailable(NO_CAPACITY_DETAIL + text, provider_message=text)
    if any(s in low for s in _BALANCE):
        return InsufficientBalance(text, provider_message=text)
    return None


def from_graphql_message(message: str, status: int, api_key: str | None) -> ProviderError:
    """A GraphQL `errors[0].message` (the SDK's QueryError) as one of our errors."""
    text = redact(message or "", api_key)
    low = text.lower()
    if low.strip().rstrip(".") in _UNAUTHORIZED:
        return InsufficientPermissions(READ_ONLY_DETAIL, provider_message=text)
    refusal = _refusal(text)
    if refusal is not None:
        return refusal
    if status == 429 or status >= 500 or any(s in low for s in _TRANSIENT):
        return unavailable(f"RunPod answered HTTP {status}: {text}", api_key)
    return ProviderError(f"RunPod refused the request: {text}", provider_message=text)


def retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None


@dataclass(frozen=True)
class Answer:
    """A REST v2 answer the caller interprets itself (2xx, 404, 409)."""

    status: int
    body: Any


_NOT_JSON: Any = object()


def _json(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return _NOT_JSON


def _detail(body: Any) -> str:
    if isinstance(body, dict):
        return str(body.get("detail") or body.get("title") or "")
    return ""


def rest_answer(
    response: httpx.Response, api_key: str, forbidden: str = READ_ONLY_DETAIL
) -> Answer:
    """A REST v2 answer, or the error it means; 404 and 409 are the caller's to read.

    401 was already raised by the HTTP client. problem+json has no machine code (a 400 is
    capacity, money or a rule only by its `detail`), so 400 is classified by words.
    """
    status, body = response.status_code, _json(response)
    if status == 429:
        raise ProviderUnavailable(
            f"RunPod rate-limited the call ({redact(_detail(body), api_key)})", rate_limited=True
        )
    if status >= 500 or (body is _NOT_JSON and status != 204):
        kind = "a non-JSON body" if body is _NOT_JSON else _detail(body)
        raise unavailable(f"RunPod answered HTTP {status}: {kind}", api_key)
    if status == 403:
        raise InsufficientPermissions(forbidden, provider_message=redact(_detail(body), api_key))
    text = redact(_detail(body), api_key)
    if status == 402:
        raise InsufficientBalance(text or "insufficient balance", provider_message=text)
    if status == 400:
        raise _refusal(text) or ProviderError(
            f"RunPod refused the request: {text}", provider_message=text
        )
    if status in (404, 409) or status < 400:
        return Answer(status, None if body is _NOT_JSON else body)
    raise ProviderError(f"RunPod refused (HTTP {status}): {text}", provider_message=text)
