"""Orphan Pods (K1): Pods in the RunPod account with our naming that belong to no live run.

One `OrphanPods` aggregate per organization (stable id), created when the reconciler finds the
first orphan. Its events make every orphan, every release request, every failed termination and
every confirmation part of the organization's audit history; they survive restarts.
A release is confirmed only when RunPod no longer lists the Pod (K2), and after the configured
number of failed attempts the orphan is `needs_manual` (K3) and stays visible.
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from domain.base import TensorantAggregate, stable_id, topic
from domain.errors import Conflict, DomainError, NotFound

# Orphan states in our model (`status` keeps RunPod's status in our words, unknown included).
ORPHAN_OPEN, ORPHAN_TERMINATING, ORPHAN_NEEDS_MANUAL, ORPHAN_GONE = (
    "orphan",
    "terminating",
    "needs_manual",
    "gone",
)
ORPHAN_LIVE = frozenset({ORPHAN_OPEN, ORPHAN_TERMINATING, ORPHAN_NEEDS_MANUAL})
RUN_POD_PREFIX = "tensorant-run-"


def run_id_of(pod_name: str) -> str | None:
    """The run id our naming puts in a Pod name (`tensorant-run-<run id>`), else None."""
    if not pod_name.startswith(RUN_POD_PREFIX):
        return None
    return pod_name.removeprefix(RUN_POD_PREFIX) or None


class OrphanPods(TensorantAggregate):
    TOPIC = "tensorant.OrphanPods"

    class Event(TensorantAggregate.Event):
        TOPIC = "tensorant.OrphanPods.Event"

    class Created(Event, TensorantAggregate.Created):
        TOPIC = "tensorant.OrphanPods.Created"

    def __init__(self) -> None:
        """State is set by the created event's apply(); annotations below only document it."""

    org_id: str
    pods: dict[str, dict[str, Any]]  # pod id -> {state, attempts, last_error, ...}

    @staticmethod
    def id_for(org_id: str) -> Any:
        return stable_id("orphans", org_id)

    @classmethod
    def open(cls, org_id: str, actor: str, at: datetime) -> OrphanPods:
        return cls._create(
            OrphanPodsOpened, id=cls.id_for(org_id), actor=actor, timestamp=at, org_id=org_id
        )

    # ------------------------------------------------------------ queries
    def live(self) -> dict[str, dict[str, Any]]:
        return {pid: p for pid, p in self.pods.items() if p["state"] in ORPHAN_LIVE}

    def is_live(self, pod_id: str) -> bool:
        return pod_id in self.live()

    # ------------------------------------------------------------ commands
    def record_found(
        self,
        pod_id: str,
        pod_name: str,
        status: str,
        cost_per_hour: Decimal,
        gpu_type_id: str | None,
        datacenter_id: str | None,
        container_disk_gb: int,
        volume_gb: int,
        uptime_seconds: int,
        actor: str,
        at: datetime,
    ) -> None:
        """The reconciler saw a Pod with our naming and no live run (idempotent while live)."""
        if self.is_live(pod_id):
            return
        self._trigger(
            OrphanPodFound,
            actor,
            at,
            pod_id=pod_id,
            pod_name=pod_name,
            run_id=run_id_of(pod_name),
            status=status,
            cost_per_hour=cost_per_hour,
            gpu_type_id=gpu_type_id,
            datacenter_id=datacenter_id,
            container_disk_gb=container_disk_gb,
            volume_gb=volume_gb,
            uptime_seconds=uptime_seconds,
        )

    def request_release(self, pod_id: str, confirm: bool, actor: str, at: datetime) -> None:
        pod = self.pods.get(pod_id)
        if pod is None or pod["state"] not in ORPHAN_LIVE:
            raise NotFound(f"orphan Pod {pod_id} not found")
        if pod["state"] in (ORPHAN_TERMINATING, ORPHAN_NEEDS_MANUAL):
            return
        if not confirm:
            raise OrphanReleaseNeedsConfirmation(
                f"releasing orphan Pod {pod_id} terminates it and deletes its files; "
                "confirm with confirm: true"
            )
        self._trigger(OrphanReleaseRequested, actor, at, pod_id=pod_id)

    def record_termination_failed(
        self, pod_id: str, error: str, max_attempts: int, actor: str, at: datetime
    ) -> None:
        pod = self.pods.get(pod_id)
        if pod is None or pod["state"] not in (ORPHAN_TERMINATING, ORPHAN_NEEDS_MANUAL):
            raise OrphanNotTerminating(f"no release of orphan Pod {pod_id} is in progress")
        attempt = int(pod["attempts"]) + 1
        self._trigger(
            OrphanTerminationFailed,
            actor,
            at,
            pod_id=pod_id,
            error=error,
            attempt=attempt,
            needs_manual=attempt >= max_attempts,
        )

    def record_gone(self, pod_id: str, actor: str, at: datetime) -> None:
        """K2: only once RunPod no longer lists the Pod; `terminated` when we released it."""
        pod = self.pods.get(pod_id)
        if pod is None or pod["state"] not in ORPHAN_LIVE:
            return
        self._trigger(
            OrphanPodGone,
            actor,
            at,
            pod_id=pod_id,
            terminated=pod["state"] in (ORPHAN_TERMINATING, ORPHAN_NEEDS_MANUAL),
        )

    def record_claimed(self, pod_id: str, run_id: str, actor: str, at: datetime) -> None:
        """A live run adopted the Pod after all (its launch found it by name)."""
        if self.is_live(pod_id):
            self._trigger(OrphanPodClaimed, actor, at, pod_id=pod_id, run_id=run_id)


@topic("tensorant.OrphanPodsOpened")
class OrphanPodsOpened(OrphanPods.Created):
    org_id: str

    def apply(self, aggregate: OrphanPods) -> None:
        aggregate.org_id = self.org_id
        aggregate.pods = {}


@topic("tensorant.OrphanPodFound")
class OrphanPodFound(OrphanPods.Event):
    pod_id: str
    pod_name: str
    run_id: str | None
    status: str
    cost_per_hour: Decimal
    gpu_type_id: str | None
    datacenter_id: str | None
    container_disk_gb: int
    volume_gb: int
    uptime_seconds: int

    def apply(self, aggregate: OrphanPods) -> None:
        aggregate.pods = {
            **aggregate.pods,
            self.pod_id: {
                "state": ORPHAN_OPEN,
                "attempts": 0,
                "last_error": None,
                "name": self.pod_name,
                "found_at": self.timestamp,
                "last_attempt_at": self.timestamp,
            },
        }


@topic("tensorant.OrphanReleaseRequested")
class OrphanReleaseRequested(OrphanPods.Event):
    pod_id: str

    def apply(self, aggregate: OrphanPods) -> None:
        pod = {
            **aggregate.pods[self.pod_id],
            "state": ORPHAN_TERMINATING,
            "last_attempt_at": self.timestamp,
        }
        aggregate.pods = {**aggregate.pods, self.pod_id: pod}


@topic("tensorant.OrphanTerminationFailed")
class OrphanTerminationFailed(OrphanPods.Event):
    pod_id: str
    error: str
    attempt: int
    needs_manual: bool

    def apply(self, aggregate: OrphanPods) -> None:
        pod = {
            **aggregate.pods[self.pod_id],
            "attempts": self.attempt,
            "last_error": self.error,
            "last_attempt_at": self.timestamp,
        }
        if self.needs_manual:
            pod["state"] = ORPHAN_NEEDS_MANUAL
        aggregate.pods = {**aggregate.pods, self.pod_id: pod}


@topic("tensorant.OrphanPodGone")
class OrphanPodGone(OrphanPods.Event):
    pod_id: str
    terminated: bool

    def apply(self, aggregate: OrphanPods) -> None:
        pod = {**aggregate.pods[self.pod_id], "state": ORPHAN_GONE}
        aggregate.pods = {**aggregate.pods, self.pod_id: pod}


@topic("tensorant.OrphanPodClaimed")
class OrphanPodClaimed(OrphanPods.Event):
    pod_id: str
    run_id: str

    def apply(self, aggregate: OrphanPods) -> None:
        pod = {**aggregate.pods[self.pod_id], "state": ORPHAN_GONE}
        aggregate.pods = {**aggregate.pods, self.pod_id: pod}


class OrphanReleaseNeedsConfirmation(DomainError):
    problem = "confirmation-required"
    title = "The request needs an explicit confirmation"


class OrphanNotTerminating(Conflict):
    problem = "illegal-transition"
    title = "Not allowed in the current state"
