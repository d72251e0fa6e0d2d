"""ComputeProvider on RunPod's GraphQL API with the runpod 1.12 SDK's query builders.

Every call takes the organization's key as an argument; the process-wide `runpod.api_key` is
never set and the SDK functions that read it (create_pod, stop_pod, resume_pod, terminate_pod)
are never called. See `adapters.runpod_transport` for how the base URL is passed per instance.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from runpod.api.mutations.pods import (
    generate_pod_deployment_mutation,
    generate_pod_resume_mutation,
    generate_pod_stop_mutation,
    generate_pod_terminate_mutation,
)

from adapters import runpod_mapping as m
from adapters.retry import RetryPolicy
from adapters.runpod_billing import RunPodBilling
from adapters.runpod_transport import GraphQLTransport, resolve_base_url
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
    PodSpec,
)

log = logging.getLogger(__name__)

# Refusals that prove nothing happened: never look again, never retry.
PERMISSION_PROBE_POD = "tensorant-permission-probe"
DEFINITE = (InvalidCredentials, InsufficientPermissions, CapacityUnavailable, InsufficientBalance)


class RunPodGraphQLCompute:
    """RunPod through GraphQL, one organization's key per call.

    Reads retry ProviderUnavailable with bounded exponential backoff and full jitter. Writes are
    never blindly repeated: a failed create is followed by a lookup by name before any new
    create, and a failed stop/resume/terminate by a re-read of the Pod.
    """

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
    ) -> None:
        self.retry = RetryPolicy(max_attempts, base_delay_s, max_delay_s, sleep, jitter)
        self.transport = GraphQLTransport(api_base_url, timeout_s)
        self.lookup_attempts = max(1, lookup_attempts)
        self._api_base_url = api_base_url
        self._timeout_s = timeout_s

    # ---------------------------------------------------------------- plumbing

    def _once(self, api_key: str, query: str) -> dict[str, Any]:
        return self.transport.post(query, api_key)

    def _read(self, api_key: str, query: str, what: str) -> dict[str, Any]:
        return self.retry.run(lambda: self._once(api_key, query), what)

    # ---------------------------------------------------------------- account and catalogue

    def check_account(self, api_key: str) -> Account:
        myself = self._read(api_key, m.QUERY_ACCOUNT, "account").get("myself")
        if not myself:
            raise InvalidCredentials("RunPod knows no account for this key")
        self._probe_pod_permission(api_key)
        return m.account(myself)

    def _probe_pod_permission(self, api_key: str) -> None:
        """Stop a Pod that cannot exist: a read-only key answers "Unauthorized", a key that may
        manage Pods answers "not found". Harmless, and it flags read-only keys at save time; it
        still proves neither create nor delete (C3 keeps `unproven`). Inference: RunPod checks
        the key's scope before looking the Pod up, as the sandbox does."""
        mutation = generate_pod_stop_mutation(m.gql_string(PERMISSION_PROBE_POD))
        try:
            self._read(api_key, mutation, "permission probe")
        except InsufficientPermissions:
            raise InsufficientPermissions(
                "the key is read-only (RunPod answered Unauthorized to a Pod mutation): it "
                "cannot launch or clean up Pods; create a key with read/write access to Pods"
            ) from None
        except (InvalidCredentials, ProviderUnavailable):
            raise
        except ProviderError:
            return  # "Pod not found": the key may manage Pods

    def list_volumes(self, api_key: str) -> list[NetworkVolume]:
        myself = self._read(api_key, m.QUERY_VOLUMES, "network volumes").get("myself") or {}
        return [m.volume(v) for v in myself.get("networkVolumes") or []]

    def resize_volume(self, api_key: str, volume_id: str, size_gb: int) -> NetworkVolume:
        """GraphQL has no volume mutation the SDK knows; REST v2 does it (like billing)."""
        from adapters.runpod_rest import RunPodRestCompute

        base = resolve_base_url(self._api_base_url)
        rest = RunPodRestCompute(base, timeout_s=self._timeout_s)
        return rest.resize_volume(api_key, volume_id, size_gb)

    def list_gpus(self, api_key: str, gpu_count: int = 1) -> list[GpuOffer]:
        return m.gpu_offers(self._read(api_key, m.gpus_query(gpu_count), "GPU types"))

    # ---------------------------------------------------------------- Pods: reads

    def list_pods(self, api_key: str) -> list[PodInfo]:
        myself = self._read(api_key, m.QUERY_PODS, "pods").get("myself") or {}
        return [m.pod_info(p) for p in myself.get("pods") or []]

    def get_pod(self, api_key: str, pod_id: str) -> PodInfo | None:
        raw = self._read(api_key, m.pod_query(pod_id), "pod").get("pod")
        return m.pod_info(raw) if raw else None

    def find_pod_by_name(self, api_key: str, name: str) -> PodInfo | None:
        """The Pod called `name`; of several, the first RunPod lists (the oldest) and a warning.

        GraphQL exposes no creation time; RunPod (and the sandbox) list Pods in creation order.
        """
        return m.oldest_named(name, [p for p in self.list_pods(api_key) if p.name == name])

    # ---------------------------------------------------------------- Pods: launch

    def launch_pod(self, api_key: str, spec: PodSpec) -> PodInfo:
        """Idempotent by name: look first; after any doubtful create, look again before retrying."""
        existing = self.find_pod_by_name(api_key, spec.name)
        if existing is not None:
            log.info("launch of %r: Pod %s already exists", spec.name, existing.id)
            return existing
        mutation = self._deploy_mutation(spec)
        last: ProviderError | None = None
        for attempt in range(self.retry.max_attempts):
            try:
                created = self._once(api_key, mutation).get("podFindAndDeployOnDemand")
            except DEFINITE:
                raise
            except ProviderError as exc:
                last = exc
                log.warning("create of %r failed (%s); looking it up by name", spec.name, exc)
                found = self._look_again(api_key, spec.name)
                if found is not None:
                    return found
                if not isinstance(exc, ProviderUnavailable) or self._last(attempt):
                    raise
                self.retry.pause(attempt, exc)
                continue
            if not created or not created.get("id"):
                raise ProviderError("RunPod answered the create without a Pod")
            return self._read_back(api_key, created, spec)
        assert last is not None  # pragma: no cover - the loop returns or raises
        raise last  # pragma: no cover

    def _deploy_mutation(self, spec: PodSpec) -> str:
        s = m.gql_string
        return str(
            generate_pod_deployment_mutation(
                name=s(spec.name),
                image_name=s(spec.image),
                gpu_type_id=s(spec.gpu_type_id),
                cloud_type="SECURE",
                support_public_ip=True,
                start_ssh=True,
                data_center_id=s(spec.datacenter_id) if spec.datacenter_id else None,
                gpu_count=spec.gpu_count,
                volume_in_gb=spec.volume_gb,
                container_disk_in_gb=spec.container_disk_gb,
                volume_mount_path=s(spec.volume_mount_path),
                env={s(k): s(v) for k, v in spec.env.items()},
                network_volume_id=s(spec.network_volume_id) if spec.network_volume_id else None,
                allowed_cuda_versions=[s(v) for v in spec.allowed_cuda_versions],
            )
        )

    def _look_again(self, api_key: str, name: str) -> PodInfo | None:
        """Listings lag behind creates: look a few times, waiting 2, 4, 8 x base_delay_s.

        The waits are not jittered: a short random wait could end before the listing catches up,
        and a create retried then would make a duplicate Pod.
        """
        for attempt in range(self.lookup_attempts):
            try:
                found = self.find_pod_by_name(api_key, name)
            except ProviderUnavailable as exc:
                log.info("lookup of %r failed (%s)", name, exc)
                found = None
            if found is not None:
                return found
            if attempt + 1 < self.lookup_attempts:
                r = self.retry
                r.sleep(min(r.max_delay_s, r.base_delay_s * 2.0 ** (attempt + 1)))
        return None

    def _read_back(self, api_key: str, created: dict[str, Any], spec: PodSpec) -> PodInfo:
        """The create answer lacks costPerHr and placement: read the Pod itself."""
        try:
            pod = self.get_pod(api_key, created["id"])
        except ProviderUnavailable:
            pod = None
        if pod is not None:
            return pod
        log.warning("Pod %s was created but cannot be read back yet", created["id"])
        machine = created.get("machine") or {}
        return m.pod_info(
            {
                **created,
                "name": spec.name,
                "desiredStatus": "RUNNING",
                "runtime": None,
                "gpuCount": spec.gpu_count,
                "networkVolumeId": spec.network_volume_id,
                "machine": {
                    **machine,
                    "gpuTypeId": spec.gpu_type_id,
                    "dataCenterId": spec.datacenter_id,
                },
            }
        )

    # ---------------------------------------------------------------- Pods: lifecycle

    def stop_pod(self, api_key: str, pod_id: str) -> None:
        self._lifecycle(
            api_key,
            pod_id,
            generate_pod_stop_mutation(m.gql_string(pod_id)),
            "stop",
            done=lambda p: p.status == POD_STOPPED,
        )

    def resume_pod(self, api_key: str, pod_id: str, gpu_count: int) -> PodInfo:
        self._lifecycle(
            api_key,
            pod_id,
            generate_pod_resume_mutation(m.gql_string(pod_id), int(gpu_count)),
            "resume",
            done=lambda p: p.status in (POD_RUNNING, POD_STARTING),
        )
        pod = self.get_pod(api_key, pod_id)
        if pod is None:
            raise PodGone(f"Pod {pod_id} is gone")
        return pod

    def terminate_pod(self, api_key: str, pod_id: str) -> None:
        """Asks RunPod to terminate; confirmation is the caller's (get_pod -> None), not ours."""
        self._lifecycle(
            api_key,
            pod_id,
            generate_pod_terminate_mutation(m.gql_string(pod_id)),
            "terminate",
            done=lambda p: False,
            gone_is_done=True,
        )

    def _last(self, attempt: int) -> bool:
        return attempt + 1 >= self.retry.max_attempts

    def _lifecycle(
        self,
        api_key: str,
        pod_id: str,
        mutation: str,
        verb: str,
        *,
        done: Callable[[PodInfo], bool],
        gone_is_done: bool = False,
    ) -> None:
        """Errors leave the state unknown: re-read the Pod and decide, then maybe try again."""
        for attempt in range(self.retry.max_attempts):
            try:
                self._once(api_key, mutation)
                return
            except (InvalidCredentials, InsufficientPermissions, InsufficientBalance):
                raise
            except ProviderError as exc:
                log.warning("%s of Pod %s failed (%s); re-reading it", verb, pod_id, exc)
                pod = self.get_pod(api_key, pod_id)
                if pod is None:
                    if gone_is_done:
                        return
                    raise PodGone(f"Pod {pod_id} is gone; it cannot {verb}") from None
                if done(pod):
                    return
                if isinstance(exc, CapacityUnavailable):
                    raise
                if not isinstance(exc, ProviderUnavailable) or self._last(attempt):
                    raise
                self.retry.pause(attempt, exc)

    # ---------------------------------------------------------------- billing (REST v2)

    def _billing(self) -> RunPodBilling:
        return RunPodBilling(resolve_base_url(self._api_base_url), self.retry, self._timeout_s)

    def billing_pods(self, api_key: str, start: datetime, end: datetime) -> list[BillingRecord]:
        return self._billing().pods(api_key, start, end)

    def billing_volumes(self, api_key: str, start: datetime, end: datetime) -> list[BillingRecord]:
        return self._billing().volumes(api_key, start, end)
