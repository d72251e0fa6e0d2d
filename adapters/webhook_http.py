"""The webhook deliverer's HTTP (R20): one POST per attempt, SSRF-guarded at every attempt.

The URL was checked when it was registered; it is checked again before each attempt, because
the host may resolve elsewhere by now (the same guard as custom S3 endpoints, `adapters.ssrf`).
Redirects are not followed: a 3xx is an answer like any other non-2xx.
"""

from __future__ import annotations

from collections.abc import Sequence

import httpx

from adapters.ssrf import Resolver, check_endpoint
from application.errors import UnsafeEndpoint
from application.webhooks import DeliveryFailed


class HttpTransport:
    def __init__(self, allow: Sequence[str] = (), *, resolver: Resolver | None = None) -> None:
        self.allow = tuple(allow)
        self.resolver = resolver
        self.client = httpx.Client(follow_redirects=False, trust_env=False)

    def check(self, url: str) -> None:
        """The registration's check (raises UnsafeEndpoint)."""
        check_endpoint(url, self.allow, resolver=self.resolver)

    def post(self, url: str, body: bytes, headers: dict[str, str], timeout: float) -> int:
        try:
            self.check(url)
        except UnsafeEndpoint as e:
            raise DeliveryFailed(f"refused by the SSRF guard: {e.detail}") from None
        try:
            answer = self.client.post(url, content=body, headers=headers, timeout=timeout)
        except httpx.TimeoutException:
            raise DeliveryFailed(f"no answer within {timeout:g} s") from None
        except httpx.HTTPError as e:
            raise DeliveryFailed(f"could not connect: {type(e).__name__}") from None
        return answer.status_code

    def close(self) -> None:
        self.client.close()
