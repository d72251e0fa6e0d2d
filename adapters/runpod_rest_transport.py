"""One REST v2 call (httpx, Bearer auth) with rate-limit pacing; answers become our errors.

problem+json carries no machine code (appendix §5), so a 400 is classified by its `detail`:
capacity wording -> CapacityUnavailable, money -> InsufficientBalance, anything else a plain
ProviderError. 404 and 409 are returned to the caller, which knows what they mean there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from adapters.runpod_errors import (
    READ_ONLY_DETAIL,
    RESUME_NO_GPUS_DETAIL,
    invalid_credentials,
    redact,
    unavailable,
)
from adapters.runpod_ratelimit import RateLimitTracker
from application.errors import (
    CapacityUnavailable,
    InsufficientBalance,
    InsufficientPermissions,
    ProviderError,
    ProviderUnavailable,
)

USER_AGENT = "tensorant-runpod-rest/1"
_CAPACITY = (
    "no longer any instances available",
    "no capacity",
    "not enough free gpus",
    "no instances",
)
_BALANCE = ("balance", "credit", "spend limit", "insufficient funds")


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any


def _detail(body: Any) -> str:
    if isinstance(body, dict):
        return str(body.get("detail") or body.get("title") or "")
    return ""


def classify_400(detail: str, api_key: str) -> ProviderError:
    text = redact(detail, api_key)
    low = text.lower()
    if "not enough free gpus" in low:
        return CapacityUnavailable(RESUME_NO_GPUS_DETAIL, provider_message=text)
    if any(s in low for s in _CAPACITY):
        return CapacityUnavailable(
            "RunPod has no machine with the requested GPU type and count right now: " + text,
            provider_message=text,
        )
    if any(s in low for s in _BALANCE):
        return InsufficientBalance(text, provider_message=text)
    return ProviderError(f"RunPod refused the request: {text}", provider_message=text)


class RestTransport:
    """Sends one request; no retries here (the adapter decides what is safe to repeat)."""

    def __init__(
        self, base_url: str, timeout_s: float, tracker: RateLimitTracker, client_label: str = ""
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.tracker = tracker
        agent = f"{USER_AGENT} ({client_label})" if client_label else USER_AGENT
        self._client = httpx.Client(
            timeout=timeout_s, headers={"User-Agent": agent, "Accept": "application/json"}
        )
        self.requests = 0  # sent, for tests and metrics
        self.throttled = 0  # 429 answers received

    def close(self) -> None:
        self._client.close()

    def call(
        self,
        method: str,
        path: str,
        api_key: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
    ) -> Answer:
        if not api_key:
            raise invalid_credentials()
        self.tracker.before_call(api_key)
        self.requests += 1
        try:
            response = self._client.request(
                method,
                self.base_url + path,
                json=json,
                params=params,
                headers={"Authorization": f"Bearer {api_key}"},
            )
        except httpx.TimeoutException:
            raise unavailable(
                f"RunPod did not answer within {self.timeout_s:g} s", api_key
            ) from None
        except httpx.HTTPError as exc:
            raise unavailable(
                f"RunPod could not be reached: {type(exc).__name__}", api_key
            ) from None
        status = response.status_code
        self.tracker.observe(api_key, status, response.headers)
        if status == 401:
            raise invalid_credentials()
        if status == 429:
            self.throttled += 1
            # Not passed as retry_after_s: the tracker already blocks this key for that long.
            raise ProviderUnavailable(
                f"RunPod rate-limited the call ({_detail(_json(response))})", rate_limited=True
            )
        body = _json(response)
        if status >= 500 or (body is _NOT_JSON and status != 204):
            kind = "a non-JSON body" if body is _NOT_JSON else _detail(body)
            raise unavailable(f"RunPod answered HTTP {status}: {kind}", api_key)
        if status == 403:
            raise InsufficientPermissions(READ_ONLY_DETAIL, provider_message=_detail(body))
        if status == 402:
            raise InsufficientBalance(redact(_detail(body), api_key) or "insufficient balance")
        if status == 400:
            raise classify_400(_detail(body), api_key)
        if status in (404, 409) or status < 400:
            return Answer(status, None if body is _NOT_JSON else body)
        raise ProviderError(redact(f"RunPod refused (HTTP {status}): {_detail(body)}", api_key))


_NOT_JSON: Any = object()


def _json(response: httpx.Response) -> Any:
    if not response.content:
        return None
    try:
        return response.json()
    except ValueError:
        return _NOT_JSON
