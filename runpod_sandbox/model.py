"""The in-memory RunPod account: Pods, network volumes, balance, faults, scenarios.

Every public method takes the one lock and first settles billing up to "now", so a reader
always sees the account as RunPod would at that instant. The API surfaces (GraphQL, REST v2,
admin) are thin translators over these methods.
"""

from __future__ import annotations

import random
import re
import secrets
import shutil
import string
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from . import seed, tenants
from .billing import (
    CONTAINER_DISK_GB_MONTH,
    SECONDS_PER_MONTH,
    VOLUME_DISK_GB_MONTH_RUNNING,
    VOLUME_DISK_GB_MONTH_STOPPED,
    Ledger,
    network_volume_hourly,
)
from .clock import SandboxClock
from .faults import NO_INSTANCES, NOT_ENOUGH_GPUS, SOMETHING_WENT_WRONG, Faults
from .ratelimit import RateLimiter

RUNNING, EXITED, TERMINATED = "RUNNING", "EXITED", "TERMINATED"
SCENARIOS = (
    "success",
    "export_fails",
    "hang",
    "corrupt_adapter",
    "crash",
    # the container never starts: the image cannot be pulled / the host's driver is too old
    "image_pull_fails",
    "cuda_mismatch",
    # the trainer reports, trains a few steps, then goes silent on every channel
    "silent_after_start",
)
NEVER_STARTS = ("image_pull_fails", "cuda_mismatch")
TRAINER_IMAGE_PREFIX = "tensorant/trainer"
RUN_ID_ENV = "TENSORANT_RUN_ID"  # a Pod on the public image runs the trainer by its start command


class SandboxError(Exception):
    """A RunPod-side refusal, surfaced as a GraphQL error message (HTTP 200)."""


class SandboxUnavailable(SandboxError):
    """RunPod failed to answer (HTTP 500 "Something went wrong"); nothing was changed."""


class CreatedThenFailed(SandboxError):
    """The Pod exists, but the answer must be an HTTP 500 (the orphan fault)."""

    def __init__(self, pod_id: str) -> None:
        super().__init__("Something went wrong. Please try again later or contact support.")
        self.pod_id = pod_id


def cuda_key(version: str) -> tuple[int, ...]:
    """ "13.1" -> (13, 1), compared numerically ("12.10" > "12.9")."""
    try:
        return tuple(int(part) for part in str(version).split("."))
    except ValueError:
        raise SandboxError(f"invalid CUDA version {version!r}") from None


@dataclass
class HeldCreate:
    """A create whose Pod exists but whose answer waits for the test (the `hold_creates` fault)."""

    pod_id: str
    name: str
    since: datetime
    released: threading.Event = field(default_factory=threading.Event)
    fail: bool = False  # answer as `create_then_500` would, once released


STOP_AFTER_WHY = "Exited by system: stopAfter reached"


def _deadline(value: Any, field_name: str) -> datetime | None:
    """An RFC 3339 `stopAfter`/`terminateAfter`; a malformed one is refused (inference)."""
    if value in (None, ""):
        return None
    try:
        at = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise SandboxError(f"{field_name} must be an RFC 3339 date-time.") from None
    if at.tzinfo is None:
        raise SandboxError(f"{field_name} must carry a time zone.")
    return at.astimezone(UTC)


def _pod_id() -> str:
    alphabet = string.ascii_lowercase + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(14))


def _status_stamp(prefix: str, t: datetime) -> str:
    # RunPod's lastStatusChange reads like a JS Date string (SDK test data).
    return f"{prefix}: {t.strftime('%a %b %d %Y %H:%M:%S')} GMT+0000 (Coordinated Universal Time)"


@dataclass
class NetworkVolume:
    id: str
    name: str
    size_gb: int
    datacenter_id: str
    created_at: datetime
    hours_billed: int = 0
    tenant: str = ""  # the user who made it (runpod_sandbox/tenants.py); "" the seeded one

    @property
    def s3_api(self) -> bool:
        return seed.DATACENTER_BY_ID[self.datacenter_id].s3_api


@dataclass
class Pod:
    id: str
    name: str
    image_name: str
    gpu_type_id: str | None
    gpu_count: int
    cloud_type: str
    datacenter_id: str
    network_volume_id: str | None
    container_disk_gb: int
    volume_gb: int
    volume_mount_path: str
    ports: str
    env: dict[str, str]
    docker_args: str
    allowed_cuda_versions: list[str]
    min_cuda_version: str | None
    cuda_version: str  # the host's, chosen at placement
    template_id: str | None
    machine_id: str
    pod_host_id: str
    memory_gb: int
    vcpu_count: int
    cost_per_hr: Decimal
    created_at: datetime
    listed_after: datetime
    desired_status: str = RUNNING
    last_started_at: datetime | None = None
    runtime_ready_at: datetime | None = None
    last_status_change: str = ""
    terminated_at: datetime | None = None
    tenant: str = ""  # the tenant key's user that created it (tenants.py)
    end_reason: str | None = None
    scenario: str | None = None
    files: dict[str, bytes] = field(default_factory=dict)
    stop_event: threading.Event = field(default_factory=threading.Event)
    trainer_ran: bool = False
    container_alive: bool = False  # a real trainer process still runs (e.g. in its stop grace)
    # GraphQL's create `stopAfter`/`terminateAfter`: RunPod stops/terminates the Pod itself then
    # (RUNPOD_FACTS appendix B); applied on the sandbox's clock by `settle`.
    stop_after: datetime | None = None
    terminate_after: datetime | None = None
    registry_auth_id: str | None = None  # the private registry's credentials it pulls with
    container_pid: int | None = None  # that process (tests pause it to order events exactly)

    @property
    def is_trainer(self) -> bool:
        """A baked trainer image, or a run's Pod on a public image with a start command (an
        image of any other name runs nothing: the benchmarks launch such Pods on purpose)."""
        if self.image_name.startswith(TRAINER_IMAGE_PREFIX):
            return True
        return bool(self.docker_args) and RUN_ID_ENV in self.env

    @property
    def never_starts(self) -> bool:
        return self.scenario in NEVER_STARTS

    @property
    def gpu_display_name(self) -> str:
        gpu = seed.GPU_BY_ID.get(self.gpu_type_id or "")
        return gpu.display_name if gpu else "CPU"

    def rates(self) -> dict[str, Decimal]:
        """Per-second rates by billing category for the Pod's current status."""
        if self.desired_status == RUNNING:
            compute = "gpu" if self.gpu_type_id else "cpu"
            return {
                compute: self.cost_per_hr / 3600,
                "container_disk": self.container_disk_gb
                * CONTAINER_DISK_GB_MONTH
                / SECONDS_PER_MONTH,
                "volume_disk": self.volume_gb * VOLUME_DISK_GB_MONTH_RUNNING / SECONDS_PER_MONTH,
            }
        if self.desired_status == EXITED:
            stopped = self.volume_gb * VOLUME_DISK_GB_MONTH_STOPPED / SECONDS_PER_MONTH
            return {"volume_disk": stopped}
        return {}


PodHook = Callable[[Pod], None]
# (pod, what) with what in "stopped" | "resumed" | "terminated"; called under the model's lock,
# so a hook must not block (the real trainer's process manager signals from its own thread).
PodLifecycleHook = Callable[[Pod, str], None]


class SandboxModel:
    """The account and every admin knob; callable from Python and served over HTTP."""

    def __init__(
        self, clock: SandboxClock, startup_seconds: float = 0.3, data_dir: Path | None = None
    ) -> None:
        self.clock = clock
        # Disks on this machine: volumes/<volume id>/ (a network volume, also served over S3),
        # pods/<pod id>/container/ (container disk), pods/<pod id>/volume/ (a Pod's volume disk).
        self.data_dir = data_dir
        self.lock = threading.RLock()
        self.startup_seconds = startup_seconds
        # Charges are booked up to "now" on every read by default (exact to the clock, as the
        # tests step it). Each settle walks every Pod under the one lock, so a sandbox serving
        # a thousand live Pods (bench/scale.py) books at most this often: what is booked later
        # is booked from where it stopped, and deadlines act at their instant, so the totals
        # are the same; a read may only see them up to this much later.
        self.settle_every_s = 0.0
        # The longest a Pod-log stream waits between looks while the Pod prints nothing (50 ms:
        # every look); the scale bench lets a thousand quiet streams wait 0.5 s.
        self.log_poll_max_s = 0.05
        self.ledger = Ledger()
        self.initial_balance = seed.INITIAL_BALANCE
        self.deposits = Decimal(0)
        self.spend_limit = seed.SPEND_LIMIT
        self.pub_key = seed.PUB_KEY
        self.faults = Faults()
        self.rng = random.Random()
        self.started_at = clock.now()
        self.billed_until = self.started_at
        self.volumes: dict[str, NetworkVolume] = {
            v.id: NetworkVolume(v.id, v.name, v.size_gb, v.datacenter_id, self.started_at)
            for v in seed.SEED_VOLUMES
        }
        self.pods: dict[str, Pod] = {}  # every Pod ever, terminated ones included
        self.templates: list[dict[str, Any]] = []
        self._scenario: tuple[str, int] = ("success", 0)
        self.on_pod_created: PodHook | None = None  # the trainer hooks in here
        self.on_pod_lifecycle: PodLifecycleHook | None = None
        self.rate_limiter = RateLimiter(clock)  # REST v2 per-key quotas
        # Per-Pod log lines for REST v2 SSE: (time, sequence, source, line).
        self.pod_logs: dict[str, list[tuple[datetime, int, str, str]]] = {}
        self.log_lock = threading.Lock()  # pod_logs and _log_seq
        self._log_seq = 0
        self.price_overrides: dict[str, Decimal] = {}  # prices move between save and launch
        self.held: dict[str, HeldCreate] = {}  # creates whose answer waits (hold_creates)
        self.hold_timeout_s = 120.0  # a held answer is given anyway after this long
        self.stock_overrides: dict[str, str] = {}  # and so does stock: GPU id -> level everywhere
        # and the hosts' drivers: (GPU id, datacenter) -> CUDA versions (`set_host_cuda`)
        self.host_cuda_overrides: dict[tuple[str, str], tuple[str, ...]] = {}
        # Container registry credentials (GraphQL saveRegistryAuth, REST v2 /v2/registries):
        # id -> {id, name, username, password}; the password is write-only, never shown.
        self.registries: dict[str, dict[str, str]] = {}
        self.serverless: Any = None  # the Serverless endpoints (runpod_sandbox.serverless)

    def save_registry(self, name: str, username: str, password: str) -> dict[str, str]:
        """A container registry credential (saveRegistryAuth, POST /v2/registries)."""
        if not name or not username or not password:
            raise SandboxError("name, username and password are required.")
        with self.lock:
            if any(r["name"] == name for r in self.registries.values()):
                # inference: RunPod's names are unique per account
                raise SandboxError(f"A container registry auth named {name} already exists.")
            reg_id = "cra_" + secrets.token_hex(8)
            self.registries[reg_id] = {
                "id": reg_id,
                "name": name,
                "username": username,
                "password": password,
            }
            return {"id": reg_id, "name": name}

    def delete_registry(self, reg_id: str) -> bool:
        with self.lock:
            return self.registries.pop(reg_id, None) is not None

    def registry_views(self) -> list[dict[str, str]]:
        """The credentials as RunPod lists them: never the password."""
        with self.lock:
            return [{"id": r["id"], "name": r["name"]} for r in self.registries.values()]

    def price(self, gpu: seed.GpuType) -> Decimal:
        """The GPU's secure on-demand price now (the catalog's, unless a test moved it)."""
        return self.price_overrides.get(gpu.id, gpu.secure_price)

    def stock(self, gpu: seed.GpuType) -> dict[str, str]:
        """The GPU's stock level per datacenter now (the catalog's, unless a test moved it)."""
        level = self.stock_overrides.get(gpu.id)
        return dict(gpu.stock) if level is None else dict.fromkeys(gpu.stock, level)

    def host_cuda(self, datacenter_id: str, gpu: seed.GpuType | None = None) -> tuple[str, ...]:
        """The CUDA versions of the hosts in a datacenter (with `gpu`'s GPUs, when given): the
        seed's, unless a test moved them (`set_host_cuda`)."""
        if gpu is not None and (gpu.id, datacenter_id) in self.host_cuda_overrides:
            return self.host_cuda_overrides[(gpu.id, datacenter_id)]
        return seed.host_cuda_versions(datacenter_id, gpu)

    def set_host_cuda(
        self, gpu_type_id: str, datacenter_id: str, versions: list[str] | None
    ) -> None:
        """Which CUDA versions `gpu_type_id`'s hosts in `datacenter_id` run (None restores the
        seed's): a GPU drafted while CUDA 13 hosts existed can lose them by launch time."""
        if gpu_type_id not in seed.GPU_BY_ID or datacenter_id not in seed.DATACENTER_BY_ID:
            raise ValueError("unknown GPU type or datacenter")
        if versions is not None and not all(
            isinstance(v, str) and re.fullmatch(r"\d+\.\d+", v) for v in versions
        ):
            raise ValueError("versions must look like 12.8")
        with self.lock:
            if versions is None:
                self.host_cuda_overrides.pop((gpu_type_id, datacenter_id), None)
            else:
                self.host_cuda_overrides[(gpu_type_id, datacenter_id)] = tuple(versions)

    def set_stock(self, gpu_type_id: str, level: str | None) -> None:
        """The GPU's stock level (High/Medium/Low/None) in all its datacenters; None restores."""
        if level is not None and level not in seed.AVAILABLE_COUNTS:
            raise ValueError(f"stock must be one of {', '.join(seed.AVAILABLE_COUNTS)}")
        with self.lock:
            if level is None:
                self.stock_overrides.pop(gpu_type_id, None)
            else:
                self.stock_overrides[gpu_type_id] = level

    def set_price(self, gpu_type_id: str, price: Decimal | float | str | None) -> None:
        with self.lock:
            if price is None:
                self.price_overrides.pop(gpu_type_id, None)
            else:
                self.price_overrides[gpu_type_id] = Decimal(str(price))

    # ---- disks -------------------------------------------------------------------------------

    def _disk_root(self) -> Path:
        if self.data_dir is None:
            raise RuntimeError("the sandbox model has no data_dir")
        return self.data_dir

    def volume_dir(self, volume_id: str) -> Path:
        """A network volume's folder: what a Pod sees at its mount, and what S3 serves."""
        path = self._disk_root() / "volumes" / volume_id
        path.mkdir(parents=True, exist_ok=True)
        return path

    def pod_workspace(self, pod: Pod) -> Path:
        """The folder mounted at the Pod's volume mount path (/workspace)."""
        if pod.network_volume_id:
            return self.volume_dir(pod.network_volume_id)
        path = self._disk_root() / "pods" / pod.id / "volume"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def pod_container_disk(self, pod: Pod) -> Path:
        """The Pod's container disk: wiped on stop, deleted on terminate."""
        path = self._disk_root() / "pods" / pod.id / "container"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def wipe_container_disk(self, pod: Pod) -> None:
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir / "pods" / pod.id / "container", ignore_errors=True)

    def delete_pod_disks(self, pod: Pod) -> None:
        if self.data_dir is not None:
            shutil.rmtree(self.data_dir / "pods" / pod.id, ignore_errors=True)

    def pod_file(self, pod: Pod, path: str) -> Path | None:
        """A path inside the Pod (`workspace/data/adapter.zip`) as a file on this machine."""
        parts = [p for p in path.strip("/").split("/") if p]
        if not parts or ".." in parts or self.data_dir is None:
            return None
        mount = [p for p in pod.volume_mount_path.strip("/").split("/") if p]
        if parts[: len(mount)] == mount:
            return self.pod_workspace(pod).joinpath(*parts[len(mount) :])
        return self.pod_container_disk(pod).joinpath(*parts)

    def _lifecycle(self, pod: Pod, what: str) -> None:
        if self.on_pod_lifecycle is not None:
            self.on_pod_lifecycle(pod, what)

    def append_log(self, pod_id: str, source: str, line: str) -> None:
        """One container or system log line of a Pod (GET /v2/pods/{id}/logs streams them)."""
        # Its own lock: a thousand trainers' lines queued behind settling, listing and billing
        # reads on the model's lock (bench/scale.py).
        with self.log_lock:
            self._log_seq += 1
            self.pod_logs.setdefault(pod_id, []).append(
                (self.clock.now(), self._log_seq, source, line)
            )

    # ---- balance and billing -------------------------------------------------------------

    @property
    def balance(self) -> Decimal:
        return self.initial_balance + self.deposits - self.ledger.total

    def settle(self) -> datetime:
        """Accrue charges up to now, stopping or terminating Pods at the instant money runs out."""
        with self.lock:
            now = self.clock.now()
            if self.settle_every_s and (now - self.billed_until).total_seconds() < (
                self.settle_every_s
            ):
                return now
            self._apply_deadlines(self.billed_until)
            while self.billed_until < now:
                boundary = min(
                    (
                        v.created_at + timedelta(hours=v.hours_billed + 1)
                        for v in self.volumes.values()
                    ),
                    default=now,
                )
                deadline = self._next_deadline()
                step_end = min(now, boundary, deadline or now)
                self._accrue_pods_until(step_end)
                self._apply_deadlines(step_end)
                if step_end == boundary:
                    for vol in self.volumes.values():
                        hour_end = vol.created_at + timedelta(hours=vol.hours_billed + 1)
                        if hour_end <= step_end:
                            # RunPod bills network volumes hourly: a whole hour, when it completes.
                            self.ledger.add(
                                "network_volume",
                                vol.id,
                                "network_volume",
                                start=hour_end - timedelta(hours=1),
                                end=hour_end,
                                rate_per_second=network_volume_hourly(vol.size_gb) / 3600,
                            )
                            vol.hours_billed += 1
                    if self.balance <= 0:
                        self._out_of_money(step_end)
            return now

    def _next_deadline(self) -> datetime | None:
        """The earliest `stopAfter`/`terminateAfter` still to act on, after billed_until."""
        due = [
            t
            for p in self.pods.values()
            for t, live in (
                (p.stop_after, p.desired_status == RUNNING),
                (p.terminate_after, p.desired_status != TERMINATED),
            )
            if t is not None and live and t > self.billed_until
        ]
        return min(due, default=None)

    def _apply_deadlines(self, at: datetime) -> None:
        """RunPod's own stop or termination of a Pod whose `stopAfter`/`terminateAfter` passed
        (at the deadline, so its bill ends there)."""
        for pod in list(self.pods.values()):
            ended = pod.desired_status == TERMINATED
            if not ended and pod.terminate_after is not None and pod.terminate_after <= at:
                self._set_terminated(pod, pod.terminate_after, "terminate_after")
            elif pod.desired_status == RUNNING and pod.stop_after and pod.stop_after <= at:
                self._set_stopped(pod, max(pod.stop_after, pod.created_at), STOP_AFTER_WHY)

    def _accrue_pods_until(self, end: datetime) -> None:
        start = self.billed_until
        live = [p for p in self.pods.values() if p.desired_status != TERMINATED]
        running_rate = sum((sum(p.rates().values(), Decimal(0)) for p in live), Decimal(0))
        balance = self.balance
        if running_rate > 0 and balance > 0 and any(p.desired_status == RUNNING for p in live):
            seconds_left = balance / running_rate
            zero_at = start + timedelta(seconds=float(seconds_left))
            if zero_at < end:
                self._book(live, start, zero_at)
                self.billed_until = zero_at
                self._out_of_money(zero_at)
                start = zero_at
                live = [p for p in self.pods.values() if p.desired_status != TERMINATED]
        self._book(live, start, end)
        self.billed_until = end

    def _book(self, pods: list[Pod], start: datetime, end: datetime) -> None:
        for pod in pods:
            for category, rate in pod.rates().items():
                self.ledger.add(
                    "pod",
                    pod.id,
                    category,  # type: ignore[arg-type]
                    start=start,
                    end=end,
                    rate_per_second=rate,
                )

    def _out_of_money(self, at: datetime) -> None:
        """RunPod at $0: Pods with a network volume stop (data kept), the rest are terminated."""
        for pod in list(self.pods.values()):
            if pod.desired_status != RUNNING:
                continue
            if pod.network_volume_id:
                self._set_stopped(pod, at, "Exited by system: balance reached $0")
            else:
                self._set_terminated(pod, at, "balance_zero")

    def add_credit(self, amount: Decimal | float | str) -> None:
        with self.lock:
            self.settle()
            self.deposits += Decimal(str(amount))

    def set_balance(self, amount: Decimal | float | str) -> None:
        """Make the balance exactly `amount` now (a deposit or a debit adjustment)."""
        with self.lock:
            self.settle()
            self.deposits += Decimal(str(amount)) - self.balance

    def current_spend_per_hr(self) -> Decimal:
        with self.lock:
            total = Decimal(0)
            for pod in self.pods.values():
                total += sum(pod.rates().values(), Decimal(0)) * 3600
            return total

    # ---- reads -----------------------------------------------------------------------------

    def account_pods(self) -> list[Pod]:
        """What `myself.pods` lists: live Pods, minus those still inside the listing lag."""
        if self.draw(self.faults.list_pods_error_rate):
            raise SandboxUnavailable(SOMETHING_WENT_WRONG)
        with self.lock:
            now = self.settle()
            tenant = tenants.current.get()
            return [
                p
                for p in self.pods.values()
                if p.desired_status != TERMINATED and p.listed_after <= now and p.tenant == tenant
            ]

    def find_pod(self, pod_id: str) -> Pod | None:
        """What `pod(input: {podId})` finds: any live Pod (terminated/unknown -> None)."""
        with self.lock:
            self.settle()
            pod = self.pods.get(pod_id)
            if pod is not None and pod.tenant != tenants.current.get():
                return None  # another user's Pod
            return pod if pod and pod.desired_status != TERMINATED else None

    def all_pods(self) -> list[Pod]:
        with self.lock:
            self.settle()
            return list(self.pods.values())

    def runtime_ready(self, pod: Pod) -> bool:
        return (
            pod.desired_status == RUNNING
            and pod.runtime_ready_at is not None
            and self.clock.now() >= pod.runtime_ready_at
        )

    def uptime_seconds(self, pod: Pod) -> int:
        if not self.runtime_ready(pod) or pod.last_started_at is None:
            return 0
        return int((self.clock.now() - pod.last_started_at).total_seconds())

    # ---- lifecycle ---------------------------------------------------------------------------

    def _host_cuda(
        self, dc: str, minimum: str | None, allowed: list[str], gpu: seed.GpuType | None = None
    ) -> str | None:
        """The CUDA version of a host in `dc` that the request admits, or None.

        `allowedCudaVersions` is an exact-match set and `minCudaVersion` a floor (RunPod refuses
        both together; REST v2 checks that before placement, GraphQL here).
        """
        for cuda in self.host_cuda(dc, gpu):
            if allowed and cuda not in allowed:
                continue
            if minimum and cuda_key(cuda) < cuda_key(minimum):
                continue
            return cuda
        return None

    def _pick_datacenter(
        self,
        gpu: seed.GpuType,
        count: int,
        wanted: str | None,
        volume: NetworkVolume | None,
        cuda: tuple[str | None, list[str]] = (None, []),
    ) -> tuple[str, str]:
        candidates = [wanted] if wanted else [dc.id for dc in seed.DATACENTERS]
        if volume is not None:
            candidates = [dc for dc in candidates if dc == volume.datacenter_id]
        for dc in candidates:
            stock = self.stock(gpu).get(dc, "None")
            host_cuda = self._host_cuda(dc, *cuda, gpu) if dc in seed.DATACENTER_BY_ID else None
            if (
                host_cuda is not None
                and count in seed.AVAILABLE_COUNTS[stock]
                and gpu.id not in self.faults.capacity_gpu_types
                and dc not in self.faults.capacity_datacenters
            ):
                return dc, host_cuda
        raise SandboxError(NO_INSTANCES)

    def _create_extras(self, spec: dict[str, Any]) -> dict[str, Any]:
        """A create's stopAfter, terminateAfter and containerRegistryAuthId, checked."""
        registry_auth_id = spec.get("containerRegistryAuthId") or None
        if registry_auth_id and registry_auth_id not in self.registries:
            raise SandboxError(f"Container registry auth {registry_auth_id} not found.")
        return {
            "stop_after": _deadline(spec.get("stopAfter"), "stopAfter"),
            "terminate_after": _deadline(spec.get("terminateAfter"), "terminateAfter"),
            "registry_auth_id": registry_auth_id,
        }

    def create_pod(self, spec: dict[str, Any]) -> Pod:
        """podFindAndDeployOnDemand / deployCpuPod with the SDK's input names."""
        with self.lock:
            now = self.settle()
            gpu_type_id = spec.get("gpuTypeId")
            gpu_count = int(spec.get("gpuCount") or 1) if gpu_type_id else 0
            volume = None
            if spec.get("networkVolumeId"):
                volume = self.volumes.get(spec["networkVolumeId"])
                if volume is None:
                    raise SandboxError("Network volume not found.")  # wording: inference
            minimum = spec.get("minCudaVersion") or None
            allowed = [str(v) for v in spec.get("allowedCudaVersions") or []]
            if minimum and allowed:
                raise SandboxError("allowedCudaVersions and minCudaVersion are mutually exclusive")
            if gpu_type_id:
                gpu = seed.GPU_BY_ID.get(gpu_type_id)
                if gpu is None:
                    raise SandboxError(NO_INSTANCES)
                dc, cuda = self._pick_datacenter(
                    gpu, gpu_count, spec.get("dataCenterId"), volume, (minimum, allowed)
                )
                cost = self.price(gpu) * gpu_count
                memory, vcpus = 62 * gpu_count, 8 * gpu_count
            else:
                dc = spec.get("dataCenterId") or (volume.datacenter_id if volume else "EU-RO-1")
                if dc in self.faults.capacity_datacenters:
                    raise SandboxError(NO_INSTANCES)
                host = seed.DATACENTER_BY_ID.get(dc)
                cuda = host.cuda_versions[0] if host else "12.8"
                cost, memory, vcpus = seed.CPU_POD_PRICE, 4, 2
            self._check_money(cost)
            pod_id = _pod_id()
            env = {str(e["key"]): str(e["value"]) for e in spec.get("env") or []}
            pod = Pod(
                id=pod_id,
                name=spec.get("name", ""),
                image_name=spec.get("imageName") or "",
                gpu_type_id=gpu_type_id,
                gpu_count=gpu_count,
                cloud_type=str(spec.get("cloudType") or "ALL"),
                datacenter_id=dc,
                network_volume_id=volume.id if volume else None,
                container_disk_gb=int(spec.get("containerDiskInGb") or 0),
                # A network volume replaces the Pod's volume disk (RunPod's storage docs).
                volume_gb=0 if volume else int(spec.get("volumeInGb") or 0),
                volume_mount_path=spec.get("volumeMountPath") or "/workspace",
                ports=spec.get("ports") or "",
                env=env,
                docker_args=spec.get("dockerArgs") or "",
                allowed_cuda_versions=allowed,
                min_cuda_version=minimum,
                cuda_version=cuda,
                template_id=spec.get("templateId"),
                machine_id=secrets.token_hex(6)[:12],
                pod_host_id=f"{pod_id}-{secrets.token_hex(4)}",
                memory_gb=memory,
                vcpu_count=vcpus,
                cost_per_hr=cost,
                created_at=now,
                listed_after=now + timedelta(seconds=self.faults.list_lag_seconds),
                tenant=tenants.current.get(),
                **self._create_extras(spec),
            )
            if pod.is_trainer:
                pod.scenario = self._next_scenario()
            self._set_running(pod, now, "Rented by User")
            self.pods[pod_id] = pod
            held = None
            if self.faults.hold_creates:
                n = self.faults.hold_creates
                self.faults = replace(self.faults, hold_creates=n - 1 if n > 0 else -1)
                held = self.held[pod_id] = HeldCreate(pod_id, pod.name, now)
            if self.faults.create_then_500:
                n = self.faults.create_then_500
                self.faults = replace(self.faults, create_then_500=n - 1 if n > 0 else -1)
                self.held.pop(pod_id, None)  # it answers 500 at once
                self._notify_created(pod)
                raise CreatedThenFailed(pod_id)
        self._notify_created(pod)
        if held is not None:
            self._wait_held(held)
        return pod

    def _wait_held(self, held: HeldCreate) -> None:
        """Block this request (a server thread) until the test releases it; the Pod exists."""
        held.released.wait(self.hold_timeout_s)
        with self.lock:
            self.held.pop(held.pod_id, None)
        if held.fail:
            raise CreatedThenFailed(held.pod_id)

    def held_creates(self) -> list[HeldCreate]:
        with self.lock:
            return list(self.held.values())

    def release_held(self, fail: bool = False) -> list[str]:
        """Let every held create answer: normally, or HTTP 500 as `create_then_500` does."""
        with self.lock:
            held = list(self.held.values())
        for h in held:
            h.fail = fail
            h.released.set()
        return [h.pod_id for h in held]

    def _notify_created(self, pod: Pod) -> None:
        if self.on_pod_created is not None and pod.is_trainer:
            self.on_pod_created(pod)

    def _check_money(self, cost_per_hr: Decimal) -> None:
        # Deploying needs >= 1 hour of credit (RunPod's pricing docs); message wording is inference.
        if self.balance < cost_per_hr:
            raise SandboxError(
                "Your account balance is too low to deploy this pod: at least one hour of "
                f"credit (${cost_per_hr:.2f}) is required."
            )
        if self.current_spend_per_hr() + cost_per_hr > self.spend_limit:
            raise SandboxError(
                f"This pod would exceed your spend limit of ${self.spend_limit:.2f}/hr."
            )

    def _pull_image(self, pod: Pod) -> None:
        """The system lines RunPod's Pod log shows before the container starts."""
        image = pod.image_name
        repo = image.partition(":")[0]
        lines = [f"create container {image}", f"{image} Pulling from {repo}"]
        if pod.scenario != "image_pull_fails":
            lines.append(f"Status: Image is up to date for {image}")
        for line in lines:
            self.append_log(pod.id, "system", line)

    def boot_failure_line(self, pod: Pod) -> str | None:
        """The line RunPod's Pod log repeats while the container never starts (the scenarios
        image_pull_fails and cuda_mismatch), as public Pod logs show them."""
        if pod.scenario == "image_pull_fails":
            repo = pod.image_name.partition(":")[0]
            return (
                f"error pulling image: Error response from daemon: pull access denied for {repo}, "
                "repository does not exist or may require 'docker login'"
            )
        if pod.scenario == "cuda_mismatch":
            return (
                "error starting container: OCI runtime create failed: nvidia-container-cli: "
                "requirement error: unsatisfied condition: cuda>=13.0, please update your "
                f"driver to a newer version (host CUDA {pod.cuda_version})"
            )
        return None

    def _set_running(self, pod: Pod, at: datetime, why: str) -> None:
        if pod.last_started_at is None:  # the first start pulls the image
            self._pull_image(pod)
        pod.desired_status = RUNNING
        pod.last_started_at = at
        pod.runtime_ready_at = at + timedelta(seconds=self.startup_seconds)
        pod.last_status_change = _status_stamp(why, at)
        pod.stop_event = threading.Event()
        failure = self.boot_failure_line(pod)
        if failure is not None:  # RunPod keeps it "running", with no runtime, and retries
            pod.runtime_ready_at = None
            self.append_log(pod.id, "system", failure)
            return
        self.append_log(pod.id, "system", f"start container ({why})")

    def _set_stopped(self, pod: Pod, at: datetime, why: str) -> None:
        pod.desired_status = EXITED
        pod.runtime_ready_at = None
        pod.last_status_change = _status_stamp(why, at)
        pod.stop_event.set()
        self.append_log(pod.id, "system", f"stop container ({why})")
        self._lifecycle(pod, "stopped")

    def _set_terminated(self, pod: Pod, at: datetime, reason: str) -> None:
        pod.desired_status = TERMINATED
        pod.runtime_ready_at = None
        pod.terminated_at = at
        pod.end_reason = reason
        pod.last_status_change = _status_stamp("Terminated", at)
        pod.stop_event.set()
        pod.files.clear()  # the volume disk dies with the Pod; network volumes live on
        self.append_log(pod.id, "system", f"remove container ({reason})")
        self._lifecycle(pod, "terminated")

    def _live(self, pod_id: str) -> Pod:
        pod = self.pods.get(pod_id)
        if pod is None or pod.desired_status == TERMINATED:
            raise SandboxError("Pod not found.")  # wording: inference
        return pod

    def stop_pod(self, pod_id: str) -> Pod:
        with self.lock:
            now = self.settle()
            pod = self._live(pod_id)
            if pod.desired_status == RUNNING:
                self._set_stopped(pod, now, "Exited by User")
            return pod

    def resume_pod(self, pod_id: str, gpu_count: int | None = None) -> Pod:
        with self.lock:
            now = self.settle()
            pod = self._live(pod_id)
            if pod.desired_status == RUNNING:
                return pod
            if self.faults.resume_no_gpus:
                raise SandboxError(NOT_ENOUGH_GPUS)
            if pod.gpu_type_id:
                gpu = seed.GPU_BY_ID[pod.gpu_type_id]
                # gpuCount 0 still starts with 1 GPU (runpod-python#371).
                pod.gpu_count = max(1, int(gpu_count or pod.gpu_count))
                if (
                    pod.gpu_count
                    not in seed.AVAILABLE_COUNTS[self.stock(gpu).get(pod.datacenter_id, "None")]
                    or gpu.id in self.faults.capacity_gpu_types
                    or pod.datacenter_id in self.faults.capacity_datacenters
                ):
                    raise SandboxError(NOT_ENOUGH_GPUS)
                pod.cost_per_hr = self.price(gpu) * pod.gpu_count
            self._check_money(pod.cost_per_hr)
            self._set_running(pod, now, "Resumed by User")
            self._lifecycle(pod, "resumed")
            return pod

    def terminate_pod(self, pod_id: str, reason: str = "user") -> None:
        with self.lock:
            now = self.settle()
            if self.faults.terminate_lies:
                n = self.faults.terminate_lies
                self.faults = replace(self.faults, terminate_lies=n - 1 if n > 0 else -1)
                return
            pod = self._live(pod_id)
            self._set_terminated(pod, now, reason)

    def vanish_pod(self, pod_id: str) -> None:
        """The Pod disappears as if deleted in the console: no call of ours did it."""
        with self.lock:
            now = self.settle()
            self._set_terminated(self._live(pod_id), now, "vanished")

    def console_terminate(self, pod_id: str) -> None:
        with self.lock:
            now = self.settle()
            self._set_terminated(self._live(pod_id), now, "console")

    def container_exited(self, pod_id: str) -> None:
        """The trainer's process ended by itself (the crash scenario)."""
        with self.lock:
            now = self.settle()
            pod = self.pods.get(pod_id)
            if pod and pod.desired_status == RUNNING:
                self._set_stopped(pod, now, "Exited by container")

    # ---- admin knobs -------------------------------------------------------------------------

    def set_scenario(self, scenario: str, count: int = 1) -> None:
        """The trainer behaviour of the next `count` trainer Pods (then back to success)."""
        if scenario not in SCENARIOS:
            raise ValueError(f"scenario must be one of {', '.join(SCENARIOS)}")
        with self.lock:
            self._scenario = (scenario, int(count))

    def _next_scenario(self) -> str:
        name, left = self._scenario
        if left <= 0:
            return "success"
        self._scenario = (name, left - 1)
        return name

    def set_faults(self, faults: Faults | dict[str, Any] | None = None, **knobs: Any) -> Faults:
        """Replace every fault knob at once (`set_faults()` clears); keyword args are the JSON keys.

        `vanish_pods: [ids]` is an action, applied now, not a standing knob.
        """
        payload: dict[str, Any] = {}
        if isinstance(faults, Faults):
            payload = faults.to_json()
            payload.pop("extra", None)
        elif faults:
            payload = dict(faults)
        payload.update(knobs)
        vanish = payload.pop("vanish_pods", None) or []
        parsed = Faults.from_json(payload)
        with self.lock:
            self.faults = parsed
            self.rng = random.Random(parsed.seed)
            for pod_id in vanish:
                self.vanish_pod(pod_id)
        return parsed

    def clear_faults(self) -> None:
        self.set_faults()

    def advance_clock(self, seconds: float) -> datetime:
        now = self.clock.advance(seconds)
        self.settle()
        return now

    def take_log_cut(self, sent: int) -> bool:
        """Whether a log stream that has sent `sent` events is cut now (log_stream_cut_after)."""
        with self.lock:
            f = self.faults
            if not f.log_stream_cut_after or sent < f.log_stream_cut_after or not f.log_stream_cuts:
                return False
            if f.log_stream_cuts > 0:
                self.faults = replace(f, log_stream_cuts=f.log_stream_cuts - 1)
            return True

    def log_finished(self, pod_id: str) -> bool:
        """No more lines can come: the Pod is not running and no container process is left."""
        with self.lock:
            pod = self.pods.get(pod_id)
            return pod is None or (pod.desired_status != RUNNING and not pod.container_alive)

    def draw(self, rate: float) -> bool:
        with self.lock:
            return rate > 0 and self.rng.random() < rate
