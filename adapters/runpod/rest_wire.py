"""The REST v2 wire (api.runpod.io/v2), the API that outlives GraphQL.

Where REST v2 differs from GraphQL:
- Account: v2 has no "myself". `GET /v2/pods` proves the key (401 invalid, 403 no access) and
  gives the spend per hour (the sum of `cost`, 0 for stopped Pods). The account id, balance and
  spend limit exist only in GraphQL's `myself`; while GraphQL lives the wire reads them through
  the account reader it is given (the GraphQL wire's). Once GraphQL is retired (404/410) the
  account is reported as UNKNOWN_ACCOUNT_ID with an unknown balance (None), and our balance
  pre-check defers to RunPod's 402 at create.
- GPU catalog and stock: `GET /v2/catalog/gpus?include=AVAILABILITY&product=POD&count=N&cloud=
  SECURE` (price.secure per GPU, dataCenters[].availability).
- Create: one GPU type per call (`gpu: {id, count, minCudaVersion}`), the volume under
  `mounts.network`, `dataCenterIds: [dc]`, registry credentials as `registry: <id>`; the answer
  is the whole Pod. No name filter exists: the caller filters the listing. REST v2 has no
  `stopAfter` (RunPod's own stop at the runtime limit plus a grace, R5): while GraphQL lives, a
  create that asks for one goes through the creator it is given (the GraphQL wire's); once
  GraphQL is retired (404/410) the Pod is created here without that backstop, and the workers'
  runtime limit is the only stop.
- Actions: `POST /v2/pods/{id}/action`; 404 and 409 are answers, not errors; `DELETE` removes a
  Pod in any status. Volume resize: `PATCH /v2/network-volumes/{id}` (S6).
- Every call is paced by the key's quota (adapters.runpod.ratelimit); a 429 is a request RunPod
  did not process (`rate_limited`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from datetime import datetime
from decimal import Decimal
from typing import Any

from adapters.runpod import rest_mapping as m
from adapters.runpod.errors import Answer, ApiRetired, rest_answer, unavailable
from adapters.runpod.http import RunPodHttp
from adapters.runpod.mapping import money
from adapters.runpod.wire import Created, Outcome
from application.errors import ProviderError, VolumeNotFound
from application.ports import (
    TRAINER_MIN_CUDA,
    Account,
    GpuOffer,
    NetworkVolume,
    PodInfo,
    PodLogLine,
    PodSpec,
)

log = logging.getLogger(__name__)

UNKNOWN_ACCOUNT_ID = "unknown-runpod-account"
USER_AGENT = "tensorant-runpod-rest/1"
_ACTION_STATUS = {404: Outcome.GONE, 409: Outcome.CONFLICT}


class RestWire:
    name = "rest"

    def pod_logs(
        self, api_key: str, pod_id: str, last_event_id: str | None = None, tail: int = 5000
    ) -> Iterator[PodLogLine]:
        return pod_logs(self, api_key, pod_id, last_event_id, tail)

    def __init__(
        self,
        http: RunPodHttp,
        *,
        account_via: Callable[[str], Account] | None = None,
        create_via: Callable[[str, PodSpec], Created] | None = None,
        client_label: str = "",
    ) -> None:
        self.http = http
        self.account_via = account_via
        self.create_via = create_via
        agent = f"{USER_AGENT} ({client_label})" if client_label else USER_AGENT
        self.headers = {"User-Agent": agent, "Accept": "application/json"}

    def call(self, method: str, path: str, api_key: str, **request: Any) -> Answer:
        """One paced REST v2 request; errors raised, 2xx/404/409 returned."""
        response = self.http.send(
            method, path, api_key, headers=self.headers, paced=True, **request
        )
        return rest_answer(response, api_key)

    # ---------------------------------------------------------------- reads

    def _raw_pods(self, api_key: str) -> list[dict[str, Any]]:
        body = self.call("GET", "/v2/pods", api_key).body or {}
        pods = [p for p in body.get("pods") or [] if p.get("status") != "TERMINATED"]
        return sorted(pods, key=lambda p: str(p.get("createdAt") or ""))

    def account(self, api_key: str) -> Account:
        spend = sum((money(p.get("cost")) for p in self._raw_pods(api_key)), Decimal(0))
        known = self._graphql_account(api_key)
        if known is None:
            return Account(id=UNKNOWN_ACCOUNT_ID, balance=None, spend_per_hour=spend)
        return Account(
            id=known.id,
            balance=known.balance,
            spend_per_hour=spend,
            spend_limit=known.spend_limit,
            email=known.email,
        )

    def _graphql_account(self, api_key: str) -> Account | None:
        if self.account_via is None:
            return None
        try:
            return self.account_via(api_key)
        except ApiRetired:
            log.warning(
                "RunPod account id and balance are unknown: REST v2 has no account query "
                "and GraphQL is retired"
            )
            return None

    def volumes(self, api_key: str) -> list[NetworkVolume]:
        body = self.call("GET", "/v2/network-volumes", api_key).body or {}
        return [m.volume(v) for v in body.get("networkVolumes") or []]

    def resize_volume(self, api_key: str, volume_id: str, size_gb: int) -> NetworkVolume:
        """S6: setting a size is safe to repeat; RunPod refuses to shrink (400)."""
        answer = self.call(
            "PATCH", f"/v2/network-volumes/{volume_id}", api_key, json={"size": int(size_gb)}
        )
        if answer.status == 404 or not isinstance(answer.body, dict):
            raise VolumeNotFound("resize", f"RunPod knows no network volume {volume_id}")
        return m.volume(answer.body)

    def registries(self, api_key: str) -> list[dict[str, Any]]:
        """`GET /v2/registries`: {id, name} of each credential (secrets are write-only)."""
        body = self.call("GET", "/v2/registries", api_key).body or {}
        return [r for r in body.get("registries") or [] if isinstance(r, dict)]

    def create_registry(self, api_key: str, name: str, username: str, password: str) -> str:
        answer = self.call(
            "POST",
            "/v2/registries",
            api_key,
            json={"name": name, "username": username, "password": password},
        )
        if answer.status not in (200, 201) or not isinstance(answer.body, dict):
            raise ProviderError(f"RunPod answered the registry create with HTTP {answer.status}")
        return str(answer.body["id"])

    def delete_registry(self, api_key: str, registry_id: str) -> None:
        """404 (already gone) is done."""
        self.call("DELETE", f"/v2/registries/{registry_id}", api_key)

    def gpus(self, api_key: str, gpu_count: int) -> list[GpuOffer]:
        """The catalog asked twice: on hosts of the trainer's CUDA (`minCudaVersion`, the
        stock a launch can use) and on every host, so a type in stock only on older drivers
        is told apart from one out of stock (`no_cuda13`)."""
        params = {
            "include": "AVAILABILITY",
            "product": "POD",
            "count": gpu_count,
            "cloud": "SECURE",
        }
        cuda = {**params, "minCudaVersion": TRAINER_MIN_CUDA}
        placeable = self.call("GET", "/v2/catalog/gpus", api_key, params=cuda)
        every = self.call("GET", "/v2/catalog/gpus", api_key, params=params)
        return m.gpu_offers(placeable.body or {}, every.body or {})

    def pods(self, api_key: str) -> list[PodInfo]:
        return [m.pod_info(p) for p in self._raw_pods(api_key)]

    def pod(self, api_key: str, pod_id: str) -> PodInfo | None:
        answer = self.call("GET", f"/v2/pods/{pod_id}", api_key)
        if answer.status == 404 or not answer.body:
            return None
        pod = m.pod_info(answer.body)
        return None if pod.provider_status == "TERMINATED" else pod

    # ---------------------------------------------------------------- writes

    def create(self, api_key: str, spec: PodSpec) -> Created:
        if spec.stop_after is not None and self.create_via is not None:
            try:
                return self.create_via(api_key, spec)
            except ApiRetired:
                log.warning(
                    "RunPod's GraphQL API is retired: Pods are created over REST v2, which has "
                    "no stopAfter; only the workers stop a Pod at its runtime limit"
                )
                self.create_via = None
        answer = self.call("POST", "/v2/pods", api_key, json=m.create_body(spec))
        if answer.status not in (200, 201) or not isinstance(answer.body, dict):
            raise ProviderError(f"RunPod answered the create with HTTP {answer.status}")
        return Created(m.pod_info(answer.body), complete=True)

    def act(self, api_key: str, pod_id: str, action: str, gpu_count: int = 1) -> Outcome:
        """v2's start takes no GPU count: the Pod keeps its own."""
        answer = self.call("POST", f"/v2/pods/{pod_id}/action", api_key, json={"action": action})
        return _ACTION_STATUS.get(answer.status, Outcome.DONE)

    def delete(self, api_key: str, pod_id: str) -> Outcome:
        answer = self.call("DELETE", f"/v2/pods/{pod_id}", api_key)
        return _ACTION_STATUS.get(answer.status, Outcome.DONE)

    def probe(self, api_key: str, pod_id: str) -> str:
        answer = self.call("POST", f"/v2/pods/{pod_id}/action", api_key, json={"action": "stop"})
        detail = answer.body.get("detail", "") if isinstance(answer.body, dict) else ""
        return f"REST v2 answered HTTP {answer.status} {detail}".strip()[:200]


def _sse_time(value: Any) -> datetime | None:
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None


def pod_logs(
    wire: RestWire, api_key: str, pod_id: str, last_event_id: str | None = None, tail: int = 5000
) -> Iterator[PodLogLine]:
    """`GET /v2/pods/{id}/logs` (SSE): `id: <time>/<seq>` then `data: {ts, source, line}`;
    `Last-Event-ID` resumes after an event. 404 ends the stream (no such Pod); 429 and 5xx are
    ProviderUnavailable with the answer's Retry-After (the caller backs off)."""
    headers = {**wire.headers, "Accept": "text/event-stream", "Cache-Control": "no-cache"}
    if last_event_id:
        headers["Last-Event-ID"] = last_event_id
    path = f"/v2/pods/{pod_id}/logs"
    with wire.http.stream(path, api_key, headers=headers, params={"tail": tail}) as r:
        if r.status_code == 404:
            return
        if r.status_code != 200:
            r.read()
            retry_after = r.headers.get("Retry-After")
            wait = float(retry_after) if retry_after and retry_after.isdigit() else None
            raise unavailable(f"RunPod's log stream answered HTTP {r.status_code}", api_key, wait)
        event_id: str | None = None
        data: list[str] = []
        for raw in r.iter_lines():
            if raw == "":
                if data:
                    yield _event(event_id or "", "\n".join(data))
                event_id, data = None, []
                continue
            if raw.startswith(":"):
                continue  # a keep-alive comment
            name, _, value = raw.partition(":")
            value = value.removeprefix(" ")
            if name == "id":
                event_id = value
            elif name == "data":
                data.append(value)


def _event(event_id: str, data: str) -> PodLogLine:
    try:
        body = json.loads(data)
    except (ValueError, RecursionError):  # nested past the parser: kept as the line it is
        body = {"line": data}
    if not isinstance(body, dict):
        body = {"line": data}
    return PodLogLine(
        id=event_id,
        time=_sse_time(body.get("ts")),
        source=str(body.get("source") or "container"),
        line=str(body.get("line", "")),
    )
