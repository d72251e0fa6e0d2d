"""One GraphQL POST exactly as runpod 1.12's `run_graphql_query` sends it, per-instance base URL.

Why not call `runpod.api.graphql.run_graphql_query` itself: it reads `RUNPOD_API_BASE_URL` from
the process environment on every call and hard-codes `timeout=30`. Setting that variable would
make the base URL process-global (two adapters, e.g. two sandboxes or a sandbox and production,
could not coexist), and the SDK folds HTTP 429/5xx JSON answers into a plain `QueryError`,
losing the status and `Retry-After` that the retry policy needs. So this module sends the SAME
request (URL `{base}/graphql`, the SDK's headers including its User-Agent, Bearer auth, body
`{"query": ...}` with no variables) and keeps the SDK's error semantics in its order: 401 first
(the SDK's AuthenticationError), then any JSON `errors` -> errors[0].message (QueryError), then
a non-JSON body (the SDK lets JSONDecodeError escape; we call it unavailable). A test proves
the bytes on the wire match the SDK's.
"""

from __future__ import annotations

import json
import os
from typing import Any

import requests
from runpod.user_agent import USER_AGENT

from adapters.runpod_errors import from_graphql_message, invalid_credentials, unavailable

DEFAULT_API_BASE_URL = "https://api.runpod.io"


def resolve_base_url(api_base_url: str | None) -> str:
    """The explicit URL, else what the SDK would use right now (env or RunPod's default)."""
    base = api_base_url or os.environ.get("RUNPOD_API_BASE_URL", DEFAULT_API_BASE_URL)
    return base.rstrip("/")


def retry_after(response: requests.Response) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


class GraphQLTransport:
    """Sends one query with one organization's key; raises our errors, never the SDK's."""

    def __init__(self, api_base_url: str | None, timeout_s: float) -> None:
        self._explicit_base = api_base_url
        self.timeout_s = timeout_s

    @property
    def url(self) -> str:
        return resolve_base_url(self._explicit_base) + "/graphql"

    def post(self, query: str, api_key: str) -> dict[str, Any]:
        """`data` of the answer; one attempt, no retries (the caller decides what is safe)."""
        if not api_key:
            raise invalid_credentials()
        headers = {
            "Content-Type": "application/json",
            "User-Agent": USER_AGENT,
            "Authorization": f"Bearer {api_key}",
        }
        try:
            response = requests.post(
                self.url, headers=headers, data=json.dumps({"query": query}), timeout=self.timeout_s
            )
        except requests.Timeout:
            raise unavailable(
                f"RunPod did not answer within {self.timeout_s:g} s", api_key
            ) from None
        except requests.RequestException as exc:
            raise unavailable(
                f"RunPod could not be reached: {type(exc).__name__}", api_key
            ) from None
        status = response.status_code
        if status == 401:
            raise invalid_credentials()
        try:
            body = response.json()
        except ValueError:  # requests' JSONDecodeError: an HTML 502/429 page from the edge
            raise unavailable(
                f"RunPod answered HTTP {status} with a non-JSON body",
                api_key,
                retry_after(response),
            ) from None
        if isinstance(body, dict) and body.get("errors"):
            first = body["errors"][0]
            message = str(first.get("message", "")) if isinstance(first, dict) else str(first)
            error = from_graphql_message(message, status, api_key)
            wait = retry_after(response)
            if wait is not None:
                error.extra["retry_after_s"] = wait
            raise error
        if status == 429 or status >= 500 or not isinstance(body, dict):
            raise unavailable(f"RunPod answered HTTP {status}", api_key, retry_after(response))
        data = body.get("data")
        if not isinstance(data, dict):
            raise unavailable(f"RunPod answered HTTP {status} without data", api_key)
        return data
