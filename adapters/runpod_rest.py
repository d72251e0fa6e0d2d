"""ComputeProvider on RunPod's REST API v2 (api.runpod.io/v2), the API that outlives GraphQL.

Choices where REST v2 differs from GraphQL (RUNPOD_FACTS appendix):
- Account check: v2 has no "myself". `GET /v2/pods` proves the key (401 invalid, 403 no
  access) and gives the spend per hour (the sum of `cost`, which is 0 for stopped Pods). The
  account id, balance and spend limit exist only in GraphQL's `myself`; while GraphQL lives the
  adapter reads them there (one call). Once GraphQL answers 404/410 (retired), the account is
  reported as UNKNOWN_ACCOUNT_ID with an unknown balance (None), and our own balance pre-check
  defers to RunPod's 402 at create.
- GPU catalog and stock: `GET /v2/catalog/gpus?include=AVAILABILITY&product=POD&count=N&cloud=
  SECURE` (runpod/docs openapi GpuType: price.secure per GPU, dataCenters[].availability).
- Launch: one GPU type per create (`gpu: {id, count, allowedCudaVersions}`), the volume under
  `mounts.network`, `dataCenterIds: [dc]`. There is no idempotency key and no name filter, so the
  adapter lists Pods and filters on the client (name, and the TENSORANT_RUN_ID env marker when
  the spec has one) before creating, and again after any doubtful create.
- Lifecycle: `POST /v2/pods/{id}/action`; any error or 409 leaves the state unknown, so the Pod
  is re-read before deciding. A terminate refused with 409 falls back to `DELETE /v2/pods/{id}`.
- Rate limits: see adapters.runpod_ratelimit; a 429 is a request RunPod did not process, so it
  is retried (after Retry-After) without a lookup.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from typing import Any

import httpx

from adapters import runpod_mapping as gql
from adapters import runpod_rest_mapping as m
from adapters.retry import RetryPolicy
from adapters.runpod_billing import billing_records, hourly
from adapters.runpod_errors import from_graphql_message, invalid_credentials
from adapters.runpod_ratelimit import RateLimitTracker
from adapters.runpod_rest_transport import Answer, RestTransport
from adapters.runpod_transport import resolve_base_url
from application.errors import (
    CapacityUnavailable,
    InsufficientBalance,
    InsufficientPermissions,
    InvalidCredentials,
    PodGone,
    ProviderError,
    ProviderUnavailable,
    VolumeNotFound,
)
from application.ports import (
    POD_RUNNING,
    POD_STARTING,
    POD_STOPPED,
    POD_TERMINATED,
    Account,
    BillingRecord,
    GpuOffer,
    NetworkVolume,
    PodInfo,
    PodSpec,
)

log = logging.getLogger(__name__)

UNKNOWN_ACCOUNT_ID = "unknown-runpod-account"
PERMISSION_PROBE_POD = "tensorant-permission-probe"
UNKNOWN_BALANCE: Decimal | None = None
DEFINITE = (InvalidCredentials, InsufficientPermissions, CapacityUnavailable, InsufficientBalance)


def _rate_limited(exc: BaseException) -> bool:
    return bool((getattr(exc, "extra", None) or {}).get("rate_limited"))


class RunPodRestCompute:
    """RunPod through REST v2, one organization's key per call."""

    def __init__(
        self,
        api_base_url: str | None = None,
        *,
        max_attempts: int = 4,
        base_delay_s: float = 0.2,
        max_delay_s: float = 3.0,
        timeout_s: float = 30,
        sleep: Callable[[float], None] = time.sleep,
        jitter: Callable[[], float] = random.random,
        lookup_attempts: int = 4,
        now: Callable[[], float] = time.monotonic,
        low_fraction: float = 0.2,
        max_wait_s: float = 90.0,
        client_label: str = "",
        account_via_graphql: bool = True,
    ) -> None:
        self.base_url = resolve_base_url(api_base_url)
        self.retry = RetryPolicy(max_attempts, base_delay_s, max_delay_s, sleep, jitter)
        self.tracker = RateLimitTracker(
            now=now, sleep=sleep, low_fraction=low_fraction, max_wait_s=max_wait_s
        )
        self.transport = RestTransport(self.base_url, timeout_s, self.tracker, client_label)
        self.lookup_attempts = max(1, lookup_attempts)
        self.timeout_s = timeout_s
        self.account_via_graphql = account_via_graphql

    # ---------------------------------------------------------------- plumbing

    def _read(
        self, method: str, path: str, api_key: str, params: dict[str, Any] | None = None
    ) -> Answer:
        return self.retry.run(
            lambda: self.transport.call(method, path, api_key, params=params), f"{method} {path}"
        )

    def _last(self, attempt: int) -> bool:
        return attempt + 1 >= self.retry.max_attempts

    # ---------------------------------------------------------------- account and catalogue

    def check_account(self, api_key: str) -> Account:
        pods = self._raw_pods(api_key)  # proves the key: 401 invalid, 403 no access
        spend = sum((gql.money(p.get("cost")) for p in pods), Decimal(0))
        self._probe_pod_permission(api_key)
        myself = self._graphql_myself(api_key) if self.account_via_graphql else None
        if myself is None:
            log.warning(
                "RunPod account id and balance are unknown: REST v2 has no account "
                "query and GraphQL is retired (or not used)"
            )
            return Account(id=UNKNOWN_ACCOUNT_ID, balance=UNKNOWN_BALANCE, spend_per_hour=spend)
        account = gql.account(myself)
        return Account(
            id=account.id,
            balance=account.balance,
            spend_per_hour=spend,
            spend_limit=account.spend_limit,
            email=account.email,
        )

    def _probe_pod_permission(self, api_key: str) -> None:
        """Stop a Pod that cannot exist: 403 flags a read-only key, 404 means Pods may be managed.

        Harmless; it proves neither create nor delete (C3 stays `unproven`). Inference: RunPod
        checks the key's scope before looking the Pod up, as the sandbox does.
        """
        path = f"/v2/pods/{PERMISSION_PROBE_POD}/action"
        try:
            self.retry.run(
                lambda: self.transport.call("POST", path, api_key, json={"action": "stop"}),
                "permission probe",
            )
        except InsufficientPermissions:
            raise InsufficientPermissions(
                "the key is read-only (RunPod answered 403 to a Pod action): it cannot launch "
                "or clean up Pods; create a key with read/write access to Pods"
            ) from None
        except (InvalidCredentials, ProviderUnavailable):
            raise
        except ProviderError as exc:  # any other refusal says nothing about the key's scope
            log.info("permission probe answered %s", exc)

    def _graphql_myself(self, api_key: str) -> dict[str, Any] | None:
        """GraphQL `myself`, or None once GraphQL is retired (HTTP 404/410)."""

        def once() -> dict[str, Any] | None:
            try:
                response = httpx.post(
                    f"{self.base_url}/graphql",
                    timeout=self.timeout_s,
                    json={"query": gql.QUERY_ACCOUNT},
                    headers={"Authorization": f"Bearer {api_key}"},
                )
            except httpx.HTTPError as exc:
                raise ProviderUnavailable(
                    f"RunPod GraphQL unreachable: {type(exc).__name__}"
                ) from None
            if response.status_code in (404, 410):
                return None
            if response.status_code == 401:
                raise invalid_credentials()
            try:
                body = response.json()
            except ValueError:
                raise ProviderUnavailable(
                    f"RunPod GraphQL answered HTTP {response.status_code}, not JSON"
                ) from None
            if body.get("errors"):
                message = str(body["errors"][0].get("message", ""))
                raise from_graphql_message(message, response.status_code, api_key)
            myself = (body.get("data") or {}).get("myself")
            if not myself:
                raise InvalidCredentials("RunPod knows no account for this key")
            return dict(myself)

        return self.retry.run(once, "GraphQL myself")

    def list_volumes(self, api_key: str) -> list[NetworkVolume]:
        body = self._read("GET", "/v2/network-volumes", api_key).body or {}
        return [m.volume(v) for v in body.get("networkVolumes") or []]

    def resize_volume(self, api_key: str, volume_id: str, size_gb: int) -> NetworkVolume:
        """S6: `PATCH /v2/network-volumes/{id} {size}`; setting a size is safe to retry."""
        path = f"/v2/network-volumes/{volume_id}"
        answer = self.retry.run(
            lambda: self.transport.call("PATCH", path, api_key, json={"size": int(size_gb)}),
            f"PATCH {path}",
        )
        if answer.status == 404 or not isinstance(answer.body, dict):
            raise VolumeNotFound("resize", f"RunPod knows no network volume {volume_id}")
        return m.volume(answer.body)

    def list_gpus(self, api_key: str, gpu_count: int = 1) -> list[GpuOffer]:
        params = {
            "include": "AVAILABILITY",
            "product": "POD",
            "count": int(gpu_count),
            "cloud": "SECURE",
        }
        return m.gpu_offers(self._read("GET", "/v2/catalog/gpus", api_key, params).body or {})

    # ---------------------------------------------------------------- Pods: reads

    def _raw_pods(self, api_key: str) -> list[dict[str, Any]]:
        body = self._read("GET", "/v2/pods", api_key).body or {}
        return [p for p in body.get("pods") or [] if p.get("status") != "TERMINATED"]

    def list_pods(self, api_key: str) -> list[PodInfo]:
        return [m.pod_info(p) for p in self._raw_pods(api_key)]

    def get_pod(self, api_key: str, pod_id: str) -> PodInfo | None:
        answer = self._read("GET", f"/v2/pods/{pod_id}", api_key)
        if answer.status == 404 or not answer.body:
            return None
        pod = m.pod_info(answer.body)
        return None if pod.status == POD_TERMINATED else pod

    def _matches(self, api_key: str, name: str, run_id: str | None = None) -> list[PodInfo]:
        """Pods called `name` (and carrying our run marker, if given), oldest first."""
        raw = [
            p
            for p in self._raw_pods(api_key)
            if p.get("name") == name
            and (run_id is None or (p.get("env") or {}).get(m.RUN_ID_ENV) == run_id)
        ]
        raw.sort(key=lambda p: str(p.get("createdAt") or ""))
        return [m.pod_info(p) for p in raw]

    def find_pod_by_name(self, api_key: str, name: str) -> PodInfo | None:
        return gql.oldest_named(name, self._matches(api_key, name))

    # ---------------------------------------------------------------- Pods: launch

    def launch_pod(self, api_key: str, spec: PodSpec) -> PodInfo:
        """Idempotent by name: look first; after any doubtful create, look again before retrying."""
        run_id = spec.env.get(m.RUN_ID_ENV)
        existing = self._matches(api_key, spec.name, run_id)
        if existing:
            log.info("launch of %r: Pod %s already exists", spec.name, existing[0].id)
            return existing[0]
        body = m.create_body(spec)
        for attempt in range(self.retry.max_attempts):
            try:
                answer = self.transport.call("POST", "/v2/pods", api_key, json=body)
            except DEFINITE:
                raise
            except ProviderUnavailable as exc:
                if not _rate_limited(exc):  # a 429 was not processed: nothing to look for
                    log.warning("create of %r failed (%s); looking it up", spec.name, exc)
                    found = self._look_again(api_key, spec.name, run_id)
                    if found is not None:
                        return found
                if self._last(attempt):
                    raise
                self.retry.pause(attempt, exc)
                continue
            if answer.status not in (200, 201) or not isinstance(answer.body, dict):
                raise ProviderError(f"RunPod answered the create with HTTP {answer.status}")
            return m.pod_info(answer.body)
        raise AssertionError("unreachable")  # pragma: no cover

    def _look_again(self, api_key: str, name: str, run_id: str | None) -> PodInfo | None:
        """Listings lag behind creates: look a few times, waiting 2, 4, 8 x base_delay_s."""
        for attempt in range(self.lookup_attempts):
            try:
                found = self._matches(api_key, name, run_id)
            except ProviderUnavailable as exc:
                log.info("lookup of %r failed (%s)", name, exc)
                found = []
            if found:
                return found[0]
            if attempt + 1 < self.lookup_attempts:
                r = self.retry
                r.sleep(min(r.max_delay_s, r.base_delay_s * 2.0 ** (attempt + 1)))
        return None

    # ---------------------------------------------------------------- Pods: lifecycle

    def stop_pod(self, api_key: str, pod_id: str) -> None:
        self._action(api_key, pod_id, "stop", done=lambda p: p.status == POD_STOPPED)

    def resume_pod(self, api_key: str, pod_id: str, gpu_count: int) -> PodInfo:
        self._action(
            api_key, pod_id, "start", done=lambda p: p.status in (POD_RUNNING, POD_STARTING)
        )
        pod = self.get_pod(api_key, pod_id)
        if pod is None:
            raise PodGone(f"Pod {pod_id} is gone")
        if pod.gpu_count != gpu_count:  # v2's start takes no count (the Pod keeps its own)
            log.warning("Pod %s resumed with %d GPUs, not %d", pod_id, pod.gpu_count, gpu_count)
        return pod

    def terminate_pod(self, api_key: str, pod_id: str) -> None:
        """Asks RunPod to terminate; confirmation is the caller's (get_pod -> None), not ours."""
        if self._action(api_key, pod_id, "terminate", done=lambda p: False, gone_is_done=True):
            return
        log.warning("terminate of Pod %s refused in its status; deleting it", pod_id)
        answer = self.retry.run(
            lambda: self.transport.call("DELETE", f"/v2/pods/{pod_id}", api_key), "DELETE pod"
        )
        if answer.status == 409:
            raise ProviderError(f"RunPod refused to delete Pod {pod_id} (HTTP 409)")

    def _action(
        self,
        api_key: str,
        pod_id: str,
        action: str,
        *,
        done: Callable[[PodInfo], bool],
        gone_is_done: bool = False,
    ) -> bool:
        """True when RunPod took the action or the Pod is already there; False on a 409 not done.

        Errors leave the state unknown: the Pod is re-read and decides, then maybe another try.
        """
        path = f"/v2/pods/{pod_id}/action"
        for attempt in range(self.retry.max_attempts):
            try:
                answer = self.transport.call("POST", path, api_key, json={"action": action})
            except (InvalidCredentials, InsufficientPermissions, InsufficientBalance):
                raise
            except ProviderError as exc:
                if _rate_limited(exc) and not self._last(attempt):
                    self.retry.pause(attempt, exc)
                    continue  # not processed: just try again after the wait
                log.warning("%s of Pod %s failed (%s); re-reading it", action, pod_id, exc)
                if self._settled(api_key, pod_id, action, done, gone_is_done):
                    return True
                if (
                    isinstance(exc, CapacityUnavailable)
                    or not isinstance(exc, ProviderUnavailable)
                    or self._last(attempt)
                ):
                    raise
                self.retry.pause(attempt, exc)
                continue
            if answer.status == 404:
                return self._settled(api_key, pod_id, action, done, gone_is_done)
            if answer.status == 409:
                if self._settled(api_key, pod_id, action, done, gone_is_done):
                    return True
                if action == "terminate":
                    return False
                raise ProviderError(f"RunPod refused to {action} Pod {pod_id} in its status")
            return True
        raise AssertionError("unreachable")  # pragma: no cover

    def _settled(
        self,
        api_key: str,
        pod_id: str,
        action: str,
        done: Callable[[PodInfo], bool],
        gone_is_done: bool,
    ) -> bool:
        pod = self.get_pod(api_key, pod_id)
        if pod is None:
            if gone_is_done:
                return True
            raise PodGone(f"Pod {pod_id} is gone; it cannot {action}")
        return done(pod)

    # ---------------------------------------------------------------- billing

    def billing_pods(self, api_key: str, start: datetime, end: datetime) -> list[BillingRecord]:
        return self._billing(api_key, "/v2/billing/pods", "podId", start, end)

    def billing_volumes(self, api_key: str, start: datetime, end: datetime) -> list[BillingRecord]:
        return self._billing(api_key, "/v2/billing/network-volumes", "networkVolumeId", start, end)

    def _billing(
        self, api_key: str, path: str, id_field: str, start: datetime, end: datetime
    ) -> list[BillingRecord]:
        body = self._read("GET", path, api_key, hourly(start, end)).body
        return billing_records(body, path, id_field)
