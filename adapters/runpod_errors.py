"""RunPod's answers translated into our errors, once, with key material scrubbed from every text."""

from __future__ import annotations

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

_CAPACITY = ("no longer any instances available",)
_RESUME_CAPACITY = ("not enough free gpus",)
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


def from_graphql_message(message: str, status: int, api_key: str | None) -> ProviderError:
    """A GraphQL `errors[0].message` (the SDK's QueryError) as one of our errors."""
    text = redact(message or "", api_key)
    low = text.lower()
    if low.strip().rstrip(".") == "unauthorized" or low.startswith("unauthorized"):
        return InsufficientPermissions(READ_ONLY_DETAIL, provider_message=text)
    if any(s in low for s in _RESUME_CAPACITY):
        return CapacityUnavailable(RESUME_NO_GPUS_DETAIL, provider_message=text)
    if any(s in low for s in _CAPACITY):
        return CapacityUnavailable(
            "RunPod has no machine with the requested GPU type and count right now: " + text,
            provider_message=text,
        )
    if any(s in low for s in _BALANCE):
        return InsufficientBalance(text, provider_message=text)
    if status == 429 or status >= 500 or any(s in low for s in _TRANSIENT):
        return unavailable(f"RunPod answered HTTP {status}: {text}", api_key)
    return ProviderError(f"RunPod refused the request: {text}", provider_message=text)
