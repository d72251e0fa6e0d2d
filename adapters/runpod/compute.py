"""RunPodCompute: the ComputeProvider port over either wire, and the one copy of the algorithm
that keeps a launch to one billed Pod (R5) and every RunPod side effect reconciled (K2).

- Launch by name: look the Pod up by its deterministic name (and run marker) before any create.
- A doubtful create (an error that may have come after RunPod made the Pod: 5xx, timeout,
  unknown text) is followed by looking again with growing, unjittered waits before any new
  create; if the last look could not read the listing, no create is tried: the launch fails as
  unavailable, and the next attempt starts by looking up the name.
- A doubtful stop/resume/terminate is followed by re-reading the Pod: it decides whether the
  call took effect, is moot (the Pod is gone) or may be tried again.
- Reads are retried with bounded exponential backoff and full jitter (adapters.retry); a REST
  v2 429 is a request RunPod did not process, repeated after its wait without any lookup.
- The permission probe (C1, C3): only a definite "Unauthorized"/403 refuses a key as
  read-only; any other answer connects it with write permission unproven and the answer kept
  for auditors (`Account.probe_answer`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol, TypeVar

from adapters.retry import RetryPolicy
from adapters.runpod.billing import RunPodBilling
from adapters.runpod.errors import rate_limited
from adapters.runpod.mapping import PLACEHOLDER_GPU_IDS, RUN_ID_ENV
from adapters.runpod.offer_cache import OfferCache
from adapters.runpod.wire import Outcome, Wire
from application.errors import (
    CapacityUnavailable,
    InsufficientBalance,
    InsufficientPermissions,
    InvalidCredentials,
    PodGone,
    ProviderError,
    ProviderUnavailable,
)
from application.ports import (
    POD_RUNNING,
    POD_STARTING,
    POD_STOPPED,
    Account,
    BillingRecord,
    GpuOffer,
    NetworkVolume,
    PodInfo,
    PodLogLine,
    PodSpec,
)

log = logging.getLogger(__name__)

T = TypeVar("T")
PERMISSION_PROBE_POD = "tensorant-permission-probe"
# Refusals that prove nothing happened: never look again, never retry.
DEFINITE = (InvalidCredentials, InsufficientPermissions, CapacityUnavailable, InsufficientBalance)
NOT_RETRIED = (InvalidCredentials, InsufficientPermissions, InsufficientBalance)
READ_ONLY = (
    "the key is read-only (RunPod refused a Pod action as unauthorized): it cannot launch or "
    "clean up Pods; create a key with read/write access to Pods"
)


class VolumeResizer(Protocol):
    def resize_volume(self, api_key: str, volume_id: str, size_gb: int) -> NetworkVolume: ...


class RegistryStore(Protocol):
    """RunPod's container registry credentials: REST v2 only (whichever wire carries Pods)."""

    def registries(self, api_key: str) -> list[dict[str, Any]]: ...

    def create_registry(self, api_key: str, name: str, username: str, password: str) -> str: ...

    def delete_registry(self, api_key: str, registry_id: str) -> None: ...


class RunPodCompute:
    """RunPod with one organization's key per call, through `wire` (GraphQL or REST v2).

    Network volumes are resized and billing is read over REST v2 whichever wire carries the
    Pods (GraphQL has neither).
    """

    def __init__(
        self,
        wire: Wire,
        *,
        volumes: VolumeResizer,
        billing: RunPodBilling,
        retry: RetryPolicy,
        lookup_attempts: int = 4,
        offers: OfferCache | None = None,
        registries: RegistryStore | None = None,
    ) -> None:
        self.wire = wire
        self.registries = registries
        self.offers = offers if offers is not None else OfferCache()
        self.volumes = volumes
        self.billing = billing
        self.retry = retry
        self.lookup_attempts = max(1, lookup_attempts)

    def _read(self, what: str, call: Callable[[], T]) -> T:
        return self.retry.run(call, f"{self.wire.name} {what}")

    def _last(self, attempt: int) -> bool:
        return attempt + 1 >= self.retry.max_attempts

    # ---------------------------------------------------------------- account and catalogue

    def check_account(self, api_key: str) -> Account:
        account = self._read("account", lambda: self.wire.account(api_key))
        return replace(account, probe_answer=self._probe(api_key))

    def _probe(self, api_key: str) -> str:
        """Stop a Pod that cannot exist. RunPod's expected answers are not documented, so only a
        definite unauthorized/forbidden refuses the key; anything else is recorded, not judged.
        Inference: RunPod checks the key's scope before looking the Pod up, as the sandbox does.
        """
        try:
            text = self._read(
                "permission probe", lambda: self.wire.probe(api_key, PERMISSION_PROBE_POD)
            )
        except InsufficientPermissions:
            raise InsufficientPermissions(READ_ONLY) from None
        except InvalidCredentials:
            raise
        except ProviderUnavailable as exc:
            text = f"no answer after {self.retry.max_attempts} attempts: {exc.detail}"
        except ProviderError as exc:
            text = f"refused: {exc.extra.get('provider_message') or exc.detail}"
        answer = f"{self.wire.name}: {text}"[:240]
        log.info("permission probe answered %r; write permission stays unproven", answer)
        return answer

    def pod_logs(
        self, api_key: str, pod_id: str, last_event_id: str | None = None, tail: int = 5000
    ) -> Iterator[PodLogLine]:
        """The Pod's logs over REST v2 (whichever wire carries the rest)."""
        follow = getattr(self.volumes, "pod_logs", None)
        if follow is None:
            return iter(())
        lines: Iterator[PodLogLine] = follow(api_key, pod_id, last_event_id, tail)
        return lines

    def list_volumes(self, api_key: str) -> list[NetworkVolume]:
        return self._read("network volumes", lambda: self.wire.volumes(api_key))

    def resize_volume(self, api_key: str, volume_id: str, size_gb: int) -> NetworkVolume:
        """S6: setting a size is idempotent, so it is retried like a read."""
        return self.retry.run(
            lambda: self.volumes.resize_volume(api_key, volume_id, size_gb), "volume resize"
        )

    def save_registry_auth(self, api_key: str, name: str, username: str, password: str) -> str:
        """REST v2 `/v2/registries` (the API that outlives GraphQL). Idempotent by `name`:
        credentials of that name are deleted first, so a retry after a create whose answer was
        lost, or a replacement, leaves one; a doubtful create is looked up by name."""
        v = self._registries()
        listed = self._read("registries", lambda: v.registries(api_key))
        for stale in [str(r["id"]) for r in listed if r.get("name") == name]:
            self.delete_registry_auth(api_key, stale)
        try:
            return v.create_registry(api_key, name, username, password)
        except DEFINITE:
            raise
        except ProviderError:
            for found in self._read("registries", lambda: v.registries(api_key)):
                if found.get("name") == name:
                    return str(found["id"])
            raise

    def delete_registry_auth(self, api_key: str, registry_auth_id: str) -> None:
        v = self._registries()
        self._read("registry delete", lambda: v.delete_registry(api_key, registry_auth_id))

    def _registries(self) -> RegistryStore:
        if self.registries is None:
            raise ProviderError("registry credentials need RunPod's REST v2 API")
        return self.registries

    def cached_gpus(self, account: str, gpu_count: int = 1) -> list[GpuOffer] | None:
        return self.offers.get_named(account, gpu_count)

    def list_gpus(
        self,
        api_key: str,
        gpu_count: int = 1,
        *,
        allow_cached: bool = False,
        account: str | None = None,
    ) -> list[GpuOffer]:
        if account is not None:
            self.offers.name(account, api_key)
        if allow_cached:
            recent = self.offers.get(api_key, gpu_count)
            if recent is not None:
                return recent
        offers = self._read("GPU types", lambda: self.wire.gpus(api_key, int(gpu_count)))
        found = [g for g in offers if g.id.lower() not in PLACEHOLDER_GPU_IDS]
        self.offers.put(api_key, gpu_count, found)
        return found

    # ---------------------------------------------------------------- Pods: reads

    def list_pods(self, api_key: str) -> list[PodInfo]:
        return self._read("pods", lambda: self.wire.pods(api_key))

    def get_pod(self, api_key: str, pod_id: str) -> PodInfo | None:
        return self._read("pod", lambda: self.wire.pod(api_key, pod_id))

    def find_pod_by_name(self, api_key: str, name: str) -> PodInfo | None:
        return _oldest(name, _named(self.list_pods(api_key), name, None))

    # ---------------------------------------------------------------- Pods: launch

    def launch_pod(self, api_key: str, spec: PodSpec) -> PodInfo:
        """Idempotent by name (R5): look first; after a doubtful create, look again first."""
        run_id = spec.env.get(RUN_ID_ENV)
        existing = _oldest(spec.name, _named(self.list_pods(api_key), spec.name, run_id))
        if existing is not None:
            log.info("launch of %r: Pod %s already exists", spec.name, existing.id)
            return existing
        for attempt in range(self.retry.max_attempts):
            try:
                created = self.wire.create(api_key, spec)
            except DEFINITE:
                raise
            except ProviderError as exc:
                if not rate_limited(exc):  # a 429 was not processed: nothing to look for
                    log.warning("create of %r failed (%s); looking it up", spec.name, exc)
                    found, looked = self._look_again(api_key, spec.name, run_id)
                    if found is not None:
                        return found
                    if not looked:
                        log.warning(
                            "create of %r: the Pod list cannot be read, so no new create; "
                            "the next launch looks the name up first",
                            spec.name,
                        )
                        raise ProviderUnavailable(
                            f"the create of {spec.name} may have made a Pod and RunPod's Pod "
                            "list could not be read; it is looked up by name before any new create"
                        ) from None
                if not isinstance(exc, ProviderUnavailable) or self._last(attempt):
                    raise
                self.retry.pause(attempt, exc)
                continue
            return created.pod if created.complete else self._read_back(api_key, created.pod)
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _look_again(
        self, api_key: str, name: str, run_id: str | None
    ) -> tuple[PodInfo | None, bool]:
        """(the Pod, whether the last look read the listing). Listings lag behind creates: look a
        few times, waiting 2, 4, 8 x base_delay_s. The waits are not jittered: a short random
        wait could end before the listing catches up, and a create retried then would make a
        duplicate Pod."""
        looked = False
        for attempt in range(self.lookup_attempts):
            try:
                found = _oldest(name, _named(self.wire.pods(api_key), name, run_id))
                looked = True
            except ProviderUnavailable as exc:
                log.info("lookup of %r failed (%s)", name, exc)
                found, looked = None, False
            if found is not None:
                return found, True
            if attempt + 1 < self.lookup_attempts:
                r = self.retry
                r.sleep(min(r.max_delay_s, r.base_delay_s * 2.0 ** (attempt + 1)))
        return None, looked

    def _read_back(self, api_key: str, partial: PodInfo) -> PodInfo:
        """A create answer without price and placement: read the Pod itself."""
        try:
            pod = self.get_pod(api_key, partial.id)
        except ProviderUnavailable:
            pod = None
        if pod is None:
            log.warning("Pod %s was created but cannot be read back yet", partial.id)
            return partial
        return pod

    # ---------------------------------------------------------------- Pods: lifecycle

    def stop_pod(self, api_key: str, pod_id: str) -> None:
        self._act(api_key, pod_id, "stop", done=lambda p: p.status == POD_STOPPED)

    def resume_pod(self, api_key: str, pod_id: str, gpu_count: int) -> PodInfo:
        self._act(
            api_key,
            pod_id,
            "start",
            done=lambda p: p.status in (POD_RUNNING, POD_STARTING),
            gpu_count=gpu_count,
        )
        pod = self.get_pod(api_key, pod_id)
        if pod is None:
            raise PodGone(f"Pod {pod_id} is gone")
        if pod.gpu_count != gpu_count:
            log.warning("Pod %s resumed with %d GPUs, not %d", pod_id, pod.gpu_count, gpu_count)
        return pod

    def terminate_pod(self, api_key: str, pod_id: str) -> None:
        """Asks RunPod to terminate; confirmation is the caller's (get_pod -> None), not ours."""
        if self._act(api_key, pod_id, "terminate", done=lambda p: False, gone_is_done=True):
            return
        log.warning("terminate of Pod %s refused in its status; deleting it", pod_id)
        if self._read("delete", lambda: self.wire.delete(api_key, pod_id)) is Outcome.CONFLICT:
            raise ProviderError(f"RunPod refused to delete Pod {pod_id} in its status")

    def _act(
        self,
        api_key: str,
        pod_id: str,
        action: str,
        *,
        done: Callable[[PodInfo], bool],
        gone_is_done: bool = False,
        gpu_count: int = 1,
    ) -> bool:
        """True when RunPod took the action or the Pod is already there; False when RunPod
        refused it in the Pod's status and it is not done. Errors leave the state unknown: the
        Pod is re-read and decides, then maybe another try."""
        for attempt in range(self.retry.max_attempts):
            try:
                outcome = self.wire.act(api_key, pod_id, action, gpu_count)
            except NOT_RETRIED:
                raise
            except ProviderError as exc:
                if rate_limited(exc) and not self._last(attempt):
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
            if outcome is Outcome.GONE:
                return self._settled(api_key, pod_id, action, done, gone_is_done)
            if outcome is Outcome.CONFLICT:
                if self._settled(api_key, pod_id, action, done, gone_is_done):
                    return True
                if action == "terminate":
                    return False
                raise ProviderError(f"RunPod refused to {action} Pod {pod_id} in its status")
            return True
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

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

    # ---------------------------------------------------------------- billing (REST v2)

    def billing_pods(self, api_key: str, start: datetime, end: datetime) -> list[BillingRecord]:
        return self.billing.pods(api_key, start, end)

    def billing_volumes(self, api_key: str, start: datetime, end: datetime) -> list[BillingRecord]:
        return self.billing.volumes(api_key, start, end)


def _named(pods: list[PodInfo], name: str, run_id: str | None) -> list[PodInfo]:
    """The Pods called `name`, oldest first; with `run_id`, not one marked for another run (a
    Pod without our marker still counts: taking it is safer than renting a second)."""
    return [p for p in pods if p.name == name and (run_id is None or p.run_id in (None, run_id))]


def _oldest(name: str, matches: list[PodInfo]) -> PodInfo | None:
    """The oldest of the Pods called `name`; several is a loud error, since every one bills."""
    if len(matches) > 1:
        log.error(
            "DUPLICATE PODS named %r: %s; using the oldest, %s (the others cost money: clean up)",
            name,
            [p.id for p in matches],
            matches[0].id,
        )
    return matches[0] if matches else None
