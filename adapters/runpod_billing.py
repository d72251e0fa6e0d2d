"""RunPod billing over REST v2 (/v2/billing/pods, /v2/billing/network-volumes); GraphQL has none."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import httpx

from adapters.retry import RetryPolicy
from adapters.runpod_errors import invalid_credentials, redact, unavailable
from adapters.runpod_mapping import money
from application.errors import InsufficientPermissions, ProviderError
from application.ports import BillingRecord


def rfc3339(t: datetime) -> str:
    """UTC with a Z; a naive datetime is taken as UTC (our clock only hands out aware ones)."""
    t = t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)
    return t.isoformat().replace("+00:00", "Z")


def parse_time(value: str) -> datetime:
    t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def hourly(start: datetime, end: datetime) -> dict[str, str]:
    """The query of an hourly billing read over [start, end)."""
    return {"startTime": rfc3339(start), "endTime": rfc3339(end), "bucketSize": "hour"}


def billing_records(body: Any, path: str, id_field: str) -> list[BillingRecord]:
    """The `records` of a /v2/billing answer, each keyed by its resource's `id_field`."""
    records = body.get("records") if isinstance(body, dict) else None
    if not isinstance(records, list):
        raise ProviderError(f"RunPod billing answered without records ({path})")
    return [
        BillingRecord(
            resource_id=str(r[id_field]),
            start=parse_time(r["startTime"]),
            end=parse_time(r["endTime"]),
            amount=money(r.get("totalAmount")),
        )
        for r in records
    ]


class RunPodBilling:
    """Hourly per-resource records; reads are idempotent, so every transient failure is retried."""

    def __init__(self, base_url: str, retry: RetryPolicy, timeout_s: float = 30) -> None:
        self.base_url = base_url.rstrip("/")
        self.retry = retry
        self.timeout_s = timeout_s

    def pods(self, api_key: str, start: datetime, end: datetime) -> list[BillingRecord]:
        return self._records(api_key, "/v2/billing/pods", "podId", start, end)

    def volumes(self, api_key: str, start: datetime, end: datetime) -> list[BillingRecord]:
        return self._records(api_key, "/v2/billing/network-volumes", "networkVolumeId", start, end)

    def _records(
        self, api_key: str, path: str, id_field: str, start: datetime, end: datetime
    ) -> list[BillingRecord]:
        params = hourly(start, end)
        body = self.retry.run(lambda: self._get(api_key, path, params), f"GET {path}")
        return billing_records(body, path, id_field)

    def _get(self, api_key: str, path: str, params: dict[str, str]) -> dict[str, Any]:
        if not api_key:
            raise invalid_credentials()
        try:
            response = httpx.get(
                self.base_url + path,
                params=params,
                timeout=self.timeout_s,
                headers={"Authorization": f"Bearer {api_key}", "Accept": "application/json"},
            )
        except httpx.TimeoutException:
            raise unavailable(
                f"RunPod billing did not answer within {self.timeout_s:g} s", api_key
            ) from None
        except httpx.HTTPError as exc:
            raise unavailable(
                f"RunPod billing could not be reached: {type(exc).__name__}", api_key
            ) from None
        status = response.status_code
        if status == 401:
            raise invalid_credentials()
        if status == 429 or status >= 500:
            wait = response.headers.get("Retry-After")
            raise unavailable(
                f"RunPod billing answered HTTP {status}",
                api_key,
                float(wait) if wait and wait.isdigit() else None,
            )
        try:
            body = response.json()
        except ValueError:
            raise unavailable(
                f"RunPod billing answered HTTP {status} with a non-JSON body", api_key
            ) from None
        if status == 403:
            raise InsufficientPermissions("the API key may not read billing")
        if status >= 400 or not isinstance(body, dict):
            detail = body.get("detail", "") if isinstance(body, dict) else ""
            raise ProviderError(
                redact(f"RunPod billing refused (HTTP {status}): {detail}", api_key)
            )
        return body
