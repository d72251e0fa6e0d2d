"""Narrow ports to the outside world, in our words; adapters implement them with the real SDKs."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, BinaryIO, Protocol
from uuid import UUID


class Clock(Protocol):
    def now(self) -> datetime:
        """An aware UTC datetime."""
        ...


# ---------------------------------------------------------------- compute (RunPod)


@dataclass(frozen=True)
class Account:
    """The RunPod account behind a key; `balance` is None when RunPod's API does not say.

    `probe_answer`: what RunPod answered the harmless write probe of the key check, a short text
    without key material, kept for auditors (C1, C3: the check proves no write permission).
    """

    id: str
    balance: Decimal | None
    spend_per_hour: Decimal
    spend_limit: Decimal | None = None
    email: str | None = None
    probe_answer: str | None = None


@dataclass(frozen=True)
class NetworkVolume:
    id: str
    name: str
    size_gb: int
    datacenter_id: str


# The trainer's image needs a host driver of CUDA 13 or newer (R5); listings, quotes and the
# create all ask RunPod for it.
TRAINER_MIN_CUDA = "13.0"


@dataclass(frozen=True)
class GpuOffer:
    """One GPU type as the provider offers it now; stock is per datacenter."""

    id: str
    display_name: str
    memory_gb: int
    price_per_hour: Decimal
    # datacenter id -> High|Medium|Low|None, on hosts whose driver runs TRAINER_MIN_CUDA
    stock: dict[str, str] = field(default_factory=dict)
    # Datacenters where RunPod has this type in stock, but on no host of TRAINER_MIN_CUDA or
    # newer: a Pod there would never start (the container's CUDA gate), so it is no offer.
    no_cuda13: tuple[str, ...] = ()

    @property
    def datacenters(self) -> list[str]:
        return sorted(dc for dc, s in self.stock.items() if s and s != "None")


@dataclass(frozen=True)
class PodSpec:
    """What one launch asks for; `name` is deterministic per run so a launch can be found again.

    CUDA (R5): `min_cuda_version` admits every host at or above it (13.0 admits 13.1); the
    exact-match `allowed_cuda_versions` set is sent only when no minimum is given, since RunPod
    refuses both at once. `stop_after` (R5): when RunPod is to stop the Pod by itself (the run's
    runtime limit plus a grace), a backstop should no worker stop it; None asks for none.
    `registry_auth_id`: RunPod's id of the private registry's credentials the image is pulled
    with (a baked image the owner attached credentials for); None pulls anonymously.
    """

    name: str
    image: str
    gpu_type_id: str
    gpu_count: int
    env: dict[str, str]
    datacenter_id: str | None = None
    network_volume_id: str | None = None
    allowed_cuda_versions: tuple[str, ...] = ()
    min_cuda_version: str | None = TRAINER_MIN_CUDA
    container_disk_gb: int = 20
    volume_gb: int = 0
    volume_mount_path: str = "/workspace"
    stop_after: datetime | None = None
    registry_auth_id: str | None = None
    # T1: the container's command instead of the image's (GraphQL dockerArgs, REST v2 args);
    # empty: the image's own (a baked trainer image)
    start_command: str = ""


# Statuses in our words; adapters map RunPod's (RUNNING, EXITED, TERMINATED, ...) onto these.
POD_STARTING = "starting"
POD_RUNNING = "running"
POD_STOPPED = "stopped"
POD_ERROR = "error"
POD_TERMINATED = "terminated"
POD_UNKNOWN = "unknown"


@dataclass(frozen=True)
class PodInfo:
    id: str
    name: str
    status: str
    cost_per_hour: Decimal
    gpu_type_id: str | None = None
    gpu_count: int = 1
    datacenter_id: str | None = None
    network_volume_id: str | None = None
    pod_host_id: str | None = None
    uptime_seconds: int = 0
    provider_status: str | None = None
    container_disk_gb: int = 0
    volume_gb: int = 0
    run_id: str | None = None  # the TENSORANT_RUN_ID marker in the Pod's env, when RunPod lists it


@dataclass(frozen=True)
class BillingRecord:
    """One provider billing bucket for one resource (Pod or network volume)."""

    resource_id: str
    start: datetime
    end: datetime
    amount: Decimal


class ComputeProvider(Protocol):
    """RunPod, called with one organization's key per call (never a process-wide key)."""

    def check_account(self, api_key: str) -> Account: ...

    def list_volumes(self, api_key: str) -> list[NetworkVolume]: ...

    def list_gpus(
        self,
        api_key: str,
        gpu_count: int = 1,
        *,
        allow_cached: bool = False,
        account: str | None = None,
    ) -> list[GpuOffer]:
        """The GPU types offered to this key now. `allow_cached`: a copy fetched with the same
        key a few seconds ago will do (a draft's check); without it RunPod is asked (a launch).
        `account`: a name for this key that `cached_gpus` will know it by."""
        ...

    def cached_gpus(self, account: str, gpu_count: int = 1) -> list[GpuOffer] | None:
        """What `list_gpus(key, gpu_count, allow_cached=True)` would answer from its copy, for
        the key `account` named in an earlier `list_gpus`; None when there is no such copy."""
        ...

    def resize_volume(self, api_key: str, volume_id: str, size_gb: int) -> NetworkVolume:
        """S6: grow a network volume at RunPod (it refuses to shrink)."""
        ...

    def save_registry_auth(self, api_key: str, name: str, username: str, password: str) -> str:
        """Private-registry credentials RunPod pulls a Pod's image with, under `name` (one per
        name: any earlier one of that name is replaced); returns RunPod's id for them."""
        ...

    def delete_registry_auth(self, api_key: str, registry_auth_id: str) -> None:
        """Done when RunPod no longer has them (already gone included)."""
        ...

    def launch_pod(self, api_key: str, spec: PodSpec) -> PodInfo:
        """Create a Pod. The RunPod adapter looks the name up first and again after a doubtful
        create; the reactor also looks it up before asking (R5), so a create that is not
        idempotent by name (RunPod's own) still makes one Pod per run."""
        ...

    def find_pod_by_name(self, api_key: str, name: str) -> PodInfo | None: ...

    def get_pod(self, api_key: str, pod_id: str) -> PodInfo | None:
        """None when RunPod no longer knows the Pod (terminated or gone)."""
        ...

    def list_pods(self, api_key: str) -> list[PodInfo]: ...

    def stop_pod(self, api_key: str, pod_id: str) -> None: ...

    def resume_pod(self, api_key: str, pod_id: str, gpu_count: int) -> PodInfo: ...

    def terminate_pod(self, api_key: str, pod_id: str) -> None: ...

    def billing_pods(self, api_key: str, start: datetime, end: datetime) -> list[BillingRecord]: ...

    def billing_volumes(
        self, api_key: str, start: datetime, end: datetime
    ) -> list[BillingRecord]: ...


# ---------------------------------------------------------------- storage (S3 API)


@dataclass(frozen=True)
class StorageLocation:
    """Where objects live; for a RunPod volume bucket = volume id and region = datacenter id."""

    kind: str  # runpod_volume | s3
    endpoint_url: str
    bucket: str
    region: str


@dataclass(frozen=True)
class S3Credentials:
    access_key_id: str
    secret_access_key: str

    def __repr__(self) -> str:  # never print the secret
        return f"S3Credentials(access_key_id=…{self.access_key_id[-4:]})"


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int
    etag: str | None = None


class ObjectStore(Protocol):
    def check(self, location: StorageLocation, credentials: S3Credentials) -> None:
        """HeadBucket, then write, read back and delete a probe; raises StorageCheckFailed(step)."""
        ...

    def head(
        self, location: StorageLocation, credentials: S3Credentials, key: str
    ) -> ObjectInfo | None: ...

    def get(self, location: StorageLocation, credentials: S3Credentials, key: str) -> bytes: ...

    def download(
        self, location: StorageLocation, credentials: S3Credentials, key: str, into: BinaryIO
    ) -> bool:
        """Stream the object into a file in chunks; False when it does not exist."""
        ...

    def upload(
        self, location: StorageLocation, credentials: S3Credentials, key: str, source: BinaryIO
    ) -> None:
        """Stream a file to the object (multipart when large), never holding it in memory."""
        ...

    def put(
        self, location: StorageLocation, credentials: S3Credentials, key: str, data: bytes
    ) -> None: ...

    def delete(self, location: StorageLocation, credentials: S3Credentials, key: str) -> None: ...

    def list(
        self, location: StorageLocation, credentials: S3Credentials, prefix: str = ""
    ) -> list[ObjectInfo]: ...

    def presign_put(
        self, location: StorageLocation, credentials: S3Credentials, key: str, expires_s: int
    ) -> str:
        """A URL the trainer can PUT to without holding the key pair (custom S3 only)."""
        ...

    def presign_get(
        self, location: StorageLocation, credentials: S3Credentials, key: str, expires_s: int
    ) -> str:
        """A URL the trainer can GET one object with, without the key pair (custom S3 only)."""
        ...

    def endpoint_for_datacenter(self, datacenter_id: str) -> str: ...


# ---------------------------------------------------------------- secrets


class SecretVault(Protocol):
    """Envelope-encrypted secrets per organization; the only place key material lives."""

    def put(self, org_id: str, name: str, secret: str) -> None: ...

    def get(self, org_id: str, name: str) -> str:
        """Raises SecretUnavailable when absent or shredded."""
        ...

    def delete(self, org_id: str, name: str) -> None: ...

    def shred(self, org_id: str) -> None:
        """Delete the organization's data key: its secrets become unrecoverable."""
        ...


# ---------------------------------------------------------------- the Hugging Face Hub


@dataclass(frozen=True)
class HubAccount:
    """Who a Hub token belongs to (`whoami-v2`): the user and the token's role
    (read, write or fineGrained)."""

    username: str
    role: str


class ModelHub(Protocol):
    """The Hugging Face Hub: checks a token and its access to a repository, downloading nothing.
    A token is passed per call and never kept."""

    def whoami(self, token: str) -> HubAccount:
        """Raises InvalidHubToken when the Hub refuses the token, HubUnavailable when it does
        not answer."""
        ...

    def can_read(self, token: str, repo_id: str) -> bool:
        """Whether the token may read the repository's files (False: gated and not approved,
        or not found). Raises HubUnavailable when the Hub does not answer."""
        ...

    def page(self, repo_id: str) -> str:
        """The repository's page on the Hub, where its licence is accepted."""
        ...

    def revision(self, token: str | None, repo_id: str) -> str:
        """R19: the commit sha the repository's `main` is at now. Raises HubUnavailable when
        the Hub does not answer, NotFound when it has no such repository."""
        ...


# ---------------------------------------------------------------- what the read side tells us


class RunIndex(Protocol):
    """What the command side needs to know about many runs; backed by the run-status view.

    It also keeps the reconciler's heartbeat (`reconciled`), read by the reconcile-lag metric.
    """

    def live_runs(self) -> list[tuple[str, str]]:
        """(org_id, run_id) of every run that is not finished or still has a Pod."""
        ...

    def live_pods(self, org_id: str) -> int:
        """Pods that need the organization's key: running, retained, terminating, orphans."""
        ...

    def busy_org_ids(self) -> set[str]:
        """Organizations with an orphan not yet gone or a deployment not deleted: with their
        live runs', the ones a reconcile pass compares with RunPod every time."""
        ...

    def org_ids(self) -> list[str]:
        """Organizations with a connected RunPod account (the reconciler lists their Pods)."""
        ...

    def reconciled(self, at: datetime, organizations: int) -> None:
        """Record that a complete reconcile pass ended at `at`."""
        ...


class OwnedResources(Protocol):
    """Which Pods and network volumes belong to an organization (backed by the billing view)."""

    def owned(self, org_id: str) -> set[tuple[str, str]]:
        """(kind, resource id) pairs, kind `pod` or `network_volume`."""
        ...


# ---------------------------------------------------------------- one driver per run


class RunLocks(Protocol):
    """Mutual exclusion per run across the processes that drive runs."""

    def hold(self, run_id: str) -> AbstractContextManager[None]: ...


# ---------------------------------------------------------------- trainer reports

# One report's log line: (boot, seq, time, text); boot/seq are None for a plain stdout line.
ReportLine = tuple[str | None, int | None, datetime, str]
# What a fresh claim does to one state document, in the claim's transaction: a new body, or a
# function of the current one (None) that returns the new body or None to keep it.
StateChange = dict[str, Any] | Callable[[dict[str, Any] | None], dict[str, Any] | None]


@dataclass(frozen=True)
class NewerReport:
    """A `StateChange` that replaces the current body with `body` unless the current one is
    of a newer report: of the same boot with a seq at least as high, or of another boot with a
    later time. `body` holds the report's `boot`, `seq` and `time`. Being a rule and not any
    function, a store can apply it in its database (PostgreSQL: the claim in one statement)."""

    body: dict[str, Any]

    def __call__(self, current: dict[str, Any] | None) -> dict[str, Any] | None:
        if current is not None:
            if current.get("boot") == self.body["boot"]:
                if int(current.get("seq", 0)) >= int(self.body["seq"]):
                    return None
            elif str(current.get("time", "")) > str(self.body["time"]):
                return None
        return self.body


def finite(value: Any) -> Any:
    """`value` with every float that is not a number (NaN, infinities) as None: what a report
    store keeps of a trainer's body (JSON has no NaN; PostgreSQL refuses it)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


class ReportStore(Protocol):
    """Where the trainer's reports land, whichever channel (callback, mailbox, Pod logs) brings
    them: each `(boot, seq)` is claimed once, log lines are stored in order, and a small state
    per run and name (the latest progress, when anything last arrived, channel cursors)."""

    def append_reports(self, run_id: str, lines: list[ReportLine], via: str) -> int:
        """Claim each line's `(boot, seq)` and store, in order and in one transaction, only the
        lines not claimed before (plain lines are always stored); returns how many were."""
        ...

    def append_many(
        self,
        batches: Mapping[str, Sequence[ReportLine]],
        via: str,
        states: Mapping[str, Mapping[str, dict[str, Any]]],
        seen: tuple[str, dict[str, Any]] | None = None,
    ) -> dict[str, int]:
        """`append_reports` of many runs in one transaction, with each run's `states` (name ->
        body) replaced and `seen` (name, body) put for each run whose reported lines held a
        fresh one; returns run id -> lines stored. The Pod-log followers of a worker write
        what they read this way, a batch every fraction of a second, not a line at a time."""
        ...

    def claim(
        self,
        run_id: str,
        boot: str,
        seq: int,
        via: str,
        state: Mapping[str, StateChange] | None = None,
        while_at: WhileAt | None = None,
    ) -> bool:
        """True the first time `(run_id, boot, seq)` is claimed, by whichever channel; a fresh
        claim also applies `state` (name -> change) in the same transaction. `while_at`:
        LogMoved, and nothing claimed, unless the log is at that version."""
        ...

    def get_state(self, run_id: str, name: str) -> dict[str, Any] | None: ...

    def claimed_seqs(self, run_id: str, boot: str) -> set[int]:
        """The `seq`s of a trainer boot's reports claimed so far, by whichever channel."""
        ...

    def get_states(self, run_ids: list[str], name: str) -> dict[str, dict[str, Any]]:
        """`get_state` of many runs in one read: run id -> state (runs without one left out)."""
        ...

    def get_states_later(
        self, run_ids: list[str], name: str
    ) -> Callable[[], dict[str, dict[str, Any]]]:
        """`get_states`, answered when called: a store may send it with its next read (inside
        a pinned connection, one round trip for both)."""
        ...

    def put_state(self, run_id: str, name: str, body: dict[str, Any]) -> None: ...

    def add_metric(self, run_id: str, boot: str, seq: int, point: dict[str, Any]) -> bool:
        """R17: keep a progress report's metrics in the run's series, once per `(boot, seq)`
        (True: kept now; a copy from another channel keeps nothing)."""
        ...


class LogMoved(Exception):
    """A claim `while_at` a version of an aggregate found the log past that version: nothing
    was claimed (the caller decided on an aggregate older than the log's)."""


@dataclass(frozen=True)
class WhileAt:
    """A claim's condition: the log's latest event of `aggregate_id` is at `version` when the
    claim is made. A trainer's report is judged on its kept run, unread since its last report:
    the claim proves the run was still that (its token not void by another process's end of
    the run) in the claim's own statement where the store can see the log (`table`: its
    events table, schema and name), or by `latest` (a read of the log) just before claiming."""

    aggregate_id: UUID
    version: int
    latest: Callable[[], int | None]
    table: tuple[str, str] | None = None

    def require(self) -> None:
        """Read the log; LogMoved unless it is still at `version`."""
        latest = self.latest()
        if latest != self.version:
            raise self.moved(latest)

    def moved(self, latest: int | None) -> LogMoved:
        return LogMoved(f"{self.aggregate_id} is at version {latest}, not {self.version}")


def change_state(change: StateChange, current: dict[str, Any] | None) -> dict[str, Any] | None:
    """The body a `StateChange` makes of the current one (None: keep it)."""
    return change(current) if callable(change) else change


@dataclass(frozen=True)
class PodLogLine:
    """One event of a Pod's log stream (REST v2 SSE): `id` resumes the stream after it."""

    id: str
    time: datetime | None
    source: str  # container | system
    line: str


class PodLogSource(Protocol):
    def pod_logs(
        self, api_key: str, pod_id: str, last_event_id: str | None = None, tail: int = 5000
    ) -> Iterator[PodLogLine]:
        """Follow the Pod's logs from after `last_event_id` (else the last `tail` lines) until
        the stream ends; a dropped stream or a refusal raises ProviderError (the caller
        resumes); a Pod RunPod does not know ends the stream."""
        ...


class Lease(Protocol):
    def release(self) -> None: ...


class Leases(Protocol):
    """Exclusive, long-held claims across worker processes (one Pod-log follower per run);
    a lease dies with its holder (a killed worker's lease is free again)."""

    def try_take(self, name: str) -> Lease | None: ...


@dataclass(frozen=True)
class ServingEndpoint:
    """A RunPod Serverless endpoint as REST v2 lists it (no env: it may carry secrets)."""

    id: str
    name: str
    workers_min: int
    workers_max: int
    pools: tuple[str, ...] = ()


@dataclass(frozen=True)
class ServingWorkers:
    running: int
    idle: int
    initializing: int
    pools: tuple[str, ...] = ()  # each worker's GPU pool (`gpuTypeId`), for its price (V3)

    @property
    def up(self) -> int:
        return self.running + self.idle + self.initializing


class ServingMeter(Protocol):
    """Managed serving's counters (V2), shared by every API process through the store beside
    the log: each organization's chat token bucket and each deployment's usage totals."""

    def take(self, key: str, capacity: float, per_second: float, now: float) -> float:
        """Take one token from `key`'s bucket (full at first, refilled at `per_second` up to
        `capacity`; `now` in seconds): 0 when taken, else the seconds until one is there."""
        ...

    def add_usage(self, deployment_id: str, counts: Mapping[str, int]) -> None:
        """Add `counts` (of `USAGE_FIELDS`) to the deployment's totals."""
        ...

    def usage(self, deployment_ids: Sequence[str]) -> dict[str, dict[str, int]]:
        """The totals of those deployments that have any."""
        ...


class ServingProvider(Protocol):
    """RunPod Serverless (REST v2 `/v2/serverless`) and each endpoint's OpenAI-compatible route,
    with the organization's key (V1, V2). 403 answers raise InsufficientPermissions."""

    def list_endpoints(self, api_key: str) -> list[ServingEndpoint]: ...

    def create_endpoint(self, api_key: str, body: dict[str, Any]) -> ServingEndpoint: ...

    def patch_endpoint(
        self, api_key: str, endpoint_id: str, body: dict[str, Any]
    ) -> ServingEndpoint | None: ...

    def delete_endpoint(self, api_key: str, endpoint_id: str) -> None:
        """Idempotent: an endpoint already gone is not an error."""

    def workers(self, api_key: str, endpoint_id: str) -> ServingWorkers | None: ...

    def billing(self, api_key: str, start: datetime, end: datetime) -> list[BillingRecord]:
        """RunPod's hourly records per endpoint (`/v2/billing/serverless`), V3."""

    def chat(
        self, api_key: str, endpoint_id: str, body: dict[str, Any], timeout_s: float
    ) -> tuple[int, dict[str, str], bytes]:
        """One chat completion: status, the headers worth passing on, the body."""

    def chat_stream(
        self, api_key: str, endpoint_id: str, body: dict[str, Any], timeout_s: float
    ) -> AbstractContextManager[tuple[int, Iterator[bytes]]]:
        """A streamed chat completion: status and the body's chunks as they arrive."""
