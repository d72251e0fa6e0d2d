"""The one HTTP client of both wires and the billing client (httpx), per-instance base URL.

Why not the SDK's `run_graphql_query`: it reads `RUNPOD_API_BASE_URL` from the process
environment on every call and hard-codes `timeout=30`. Setting that variable would make the base
URL process-global (two adapters, e.g. a sandbox and production, could not coexist), and the SDK
folds HTTP 429/5xx JSON answers into a plain QueryError, losing the status and Retry-After the
retry policy needs. The GraphQL wire therefore sends the SDK's exact request through this client
(a test compares the bytes), and REST v2 calls are paced by the per-key quota tracker.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from adapters.runpod.errors import invalid_credentials, unavailable
from adapters.runpod.ratelimit import RateLimitTracker

DEFAULT_API_BASE_URL = "https://api.runpod.io"


def resolve_base_url(api_base_url: str | None) -> str:
    """The explicit URL, else what the SDK would use right now (env or RunPod's default)."""
    base = api_base_url or os.environ.get("RUNPOD_API_BASE_URL", DEFAULT_API_BASE_URL)
    return base.rstrip("/")


class RunPodHttp:
    """Sends one request with one organization's key; no retries (the caller decides).

    Transport failures become ProviderUnavailable and 401 InvalidCredentials; every other
    status is returned for the wire to read. `paced` calls (REST v2) wait for the key's quota.
    """

    def __init__(
        self, api_base_url: str | None, timeout_s: float, tracker: RateLimitTracker
    ) -> None:
        self._explicit_base = api_base_url
        self.timeout_s = timeout_s
        self.tracker = tracker
        self._client = httpx.Client(timeout=timeout_s)
        # Pod-log streams stay open for a whole run: they get a pool of their own, so however
        # many a worker follows, its other RunPod calls never wait for a free connection.
        self._streams = httpx.Client(
            timeout=timeout_s,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=8),
        )
        self.requests = 0  # sent, for tests and metrics
        self.throttled = 0  # 429 answers received

    @property
    def base_url(self) -> str:
        return resolve_base_url(self._explicit_base)

    def close(self) -> None:
        self._client.close()
        self._streams.close()

    def send(
        self,
        method: str,
        path: str,
        api_key: str,
        *,
        headers: dict[str, str],
        paced: bool,
        **request: Any,
    ) -> httpx.Response:
        if not api_key:
            raise invalid_credentials()
        if paced:
            self.tracker.before_call(api_key)
        self.requests += 1
        try:
            response = self._client.request(
                method,
                self.base_url + path,
                headers={**headers, "Authorization": f"Bearer {api_key}"},
                **request,
            )
        except httpx.TimeoutException:
            raise unavailable(
                f"RunPod did not answer within {self.timeout_s:g} s", api_key
            ) from None
        except httpx.HTTPError as exc:
            raise unavailable(
                f"RunPod could not be reached: {type(exc).__name__}", api_key
            ) from None
        if paced:
            self.tracker.observe(api_key, response.status_code, response.headers)
        if response.status_code == 429:
            self.throttled += 1
        if response.status_code == 401:
            raise invalid_credentials()
        return response

    @contextmanager
    def stream(
        self,
        path: str,
        api_key: str,
        *,
        headers: dict[str, str],
        params: dict[str, Any],
        read_timeout_s: float = 120.0,
    ) -> Iterator[httpx.Response]:
        """A paced GET whose body is read as it arrives (REST v2's Pod-log SSE)."""
        if not api_key:
            raise invalid_credentials()
        self.tracker.before_call(api_key)
        self.requests += 1
        timeout = httpx.Timeout(self.timeout_s, read=read_timeout_s)
        try:
            with self._streams.stream(
                "GET",
                self.base_url + path,
                headers={**headers, "Authorization": f"Bearer {api_key}"},
                params=params,
                timeout=timeout,
            ) as response:
                self.tracker.observe(api_key, response.status_code, response.headers)
                if response.status_code == 429:
                    self.throttled += 1
                if response.status_code == 401:
                    raise invalid_credentials()
                yield response
        except httpx.TimeoutException:
            raise unavailable("RunPod's log stream went quiet", api_key) from None
        except httpx.HTTPError as exc:
            raise unavailable(f"RunPod's log stream broke: {type(exc).__name__}", api_key) from None
