"""RunPod billing over REST v2 (/v2/billing/pods, /v2/billing/network-volumes), whichever wire
carries the Pods: GraphQL has no billing at all."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from adapters.retry import RetryPolicy
from adapters.runpod.errors import rest_answer
from adapters.runpod.http import RunPodHttp
from adapters.runpod.mapping import money
from application.errors import ProviderError
from application.ports import BillingRecord

BILLING_FORBIDDEN = "the API key may not read billing"


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

    def __init__(self, http: RunPodHttp, retry: RetryPolicy, headers: dict[str, str]) -> None:
        self.http = http
        self.retry = retry
        self.headers = headers  # the REST v2 wire's: one client as far as quotas go

    def pods(self, api_key: str, start: datetime, end: datetime) -> list[BillingRecord]:
        return self._records(api_key, "/v2/billing/pods", "podId", start, end)

    def volumes(self, api_key: str, start: datetime, end: datetime) -> list[BillingRecord]:
        return self._records(api_key, "/v2/billing/network-volumes", "networkVolumeId", start, end)

    def _records(
        self, api_key: str, path: str, id_field: str, start: datetime, end: datetime
    ) -> list[BillingRecord]:
        params = hourly(start, end)

        def once() -> Any:
            response = self.http.send(
                "GET", path, api_key, headers=self.headers, paced=True, params=params
            )
            answer = rest_answer(response, api_key, forbidden=BILLING_FORBIDDEN)
            if answer.status != 200:
                raise ProviderError(f"RunPod billing answered HTTP {answer.status} ({path})")
            return answer.body

        return billing_records(self.retry.run(once, f"GET {path}"), path, id_field)
