"""A training run and its Pod (R1–R13): the state machine of the run states (docs/contract.md),
refusing illegal moves."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from domain.base import TensorantAggregate, topic
from domain.errors import Conflict, IllegalTransition
from domain.run_config import RunConfig

# Run states (docs/contract.md, Runs)
DRAFT, LAUNCHING, RUNNING, EXPORTING, VERIFYING = (
    "draft",
    "launching",
    "running",
    "exporting",
    "verifying",
)
RELEASING, SUCCEEDED, NEEDS_RECOVERY, RECOVERING = (
    "releasing",
    "succeeded",
    "needs_recovery",
    "recovering",
)
CANCELLING, CANCELLED, FAILED, DISCARDED = "cancelling", "cancelled", "failed", "discarded"
STATES = (
    DRAFT,
    LAUNCHING,
    RUNNING,
    EXPORTING,
    VERIFYING,
    RELEASING,
    SUCCEEDED,
    NEEDS_RECOVERY,
    RECOVERING,
    CANCELLING,
    CANCELLED,
    FAILED,
)
TERMINAL = frozenset({SUCCEEDED, CANCELLED, FAILED, DISCARDED})
TRAINING = frozenset({RUNNING, EXPORTING})

# Pod states in our model; the Pod outlives the run's terminal state until RunPod confirms.
POD_NONE, POD_RUNNING, POD_STOPPED = "none", "running", "stopped"
POD_TERMINATING, POD_NEEDS_MANUAL, POD_TERMINATED, POD_GONE = (
    "terminating",
    "needs_manual",
    "terminated",
    "gone",
)
POD_LIVE = frozenset({POD_RUNNING, POD_STOPPED, POD_TERMINATING, POD_NEEDS_MANUAL})

# Stable reason codes
EXPORT_FAILED, RUNTIME_LIMIT, CAPACITY, ADAPTER_INVALID = (
    "export_failed",
    "runtime_limit",
    "capacity",
    "adapter_invalid",
)
USER_CANCELLED, TRAINER_CRASHED, POD_VANISHED = "user_cancelled", "trainer_crashed", "pod_vanished"
RELEASED_UNVERIFIED, LAUNCH_FAILED = "released_unverified", "launch_failed"


class Run(TensorantAggregate):
    TOPIC = "tensorant.Run"

    class Event(TensorantAggregate.Event):
        TOPIC = "tensorant.Run.Event"

    class Created(Event, TensorantAggregate.Created):
        TOPIC = "tensorant.Run.Created"

    def __init__(self) -> None:
        """State is set by the created event's apply(); annotations below only document it."""

    org_id: str
    config: RunConfig
    state: str
    state_reason: str | None
    accepted_price: Decimal | None
    pod_id: str | None
    pod_name: str | None
    pod_status: str
    pod_host_id: str | None
    datacenter_id: str | None
    price_per_hour: Decimal | None
    started_at: datetime | None
    ended_at: datetime | None
    training_started: bool
    # The trainer's report that started training (`TrainingStarted.report`): its key (boot,
    # seq), the channel it came by and the progress it carried; None before, and for a run
    # whose training was started by a report recorded before reports were kept here.
    started_by: dict[str, Any] | None
    stop_reason: str | None
    termination_intent: str | None
    termination_attempts: int
    last_error: str | None
    exported: dict[str, Any] | None
    adapter: dict[str, Any] | None
    history: list[str]

    # ------------------------------------------------------------ drafts (R1, R3)
    @classmethod
    def draft(
        cls, org_id: str, config: RunConfig, actor: str, at: datetime, need_gb: int | None = None
    ) -> Run:
        """`need_gb`: the memory a storage base model needs, estimated from its config.json."""
        return cls._create(
            RunDrafted,
            actor=actor,
            timestamp=at,
            org_id=org_id,
            config=config.validated(need_gb).as_dict(),
        )

    def ensure_editable(self) -> None:
        self._require(DRAFT, action="edit")

    def update_draft(
        self, config: RunConfig, actor: str, at: datetime, need_gb: int | None = None
    ) -> None:
        self.ensure_editable()
        self._trigger(RunDraftUpdated, actor, at, config=config.validated(need_gb).as_dict())

    def discard(self, actor: str, at: datetime) -> None:
        self._require(DRAFT, action="delete")
        self._trigger(RunDiscarded, actor, at)

    # ------------------------------------------------------------ launch (R4, R5)
    def ensure_launchable(self) -> None:
        self._require(DRAFT, action="launch", problem=NotADraft)

    def confirm_launch(
        self,
        accepted_price: Decimal,
        quoted_price: Decimal,
        datacenter_id: str | None,
        actor: str,
        at: datetime,
    ) -> None:
        self._require(DRAFT, action="launch", problem=NotADraft)
        self._trigger(
            LaunchConfirmed,
            actor,
            at,
            accepted_price=accepted_price,
            quoted_price=quoted_price,
            datacenter_id=datacenter_id,
        )

    def reject_launch(self, reason: str, detail: str, actor: str, at: datetime) -> None:
        self._require(DRAFT, action="reject a launch of")
        self._trigger(LaunchRejected, actor, at, reason=reason, detail=detail)

    def record_pod_launched(
        self,
        pod_id: str,
        pod_name: str,
        cost_per_hour: Decimal,
        datacenter_id: str | None,
        pod_host_id: str | None,
        container_disk_gb: int,
        volume_gb: int,
        actor: str,
        at: datetime,
    ) -> None:
        if self.pod_id == pod_id:
            return  # the same answer seen twice (retried launch): nothing new
        if self.pod_id is not None:
            raise IllegalTransition(f"run already has Pod {self.pod_id}; one launch = one Pod")
        if self.state == VERIFYING and self.exported is None:
            raise IllegalTransition("a verifying run without an export cannot gain a Pod")
        self._require(LAUNCHING, CANCELLING, VERIFYING, action="record a Pod for")
        self._trigger(
            PodLaunched,
            actor,
            at,
            pod_id=pod_id,
            pod_name=pod_name,
            cost_per_hour=cost_per_hour,
            datacenter_id=datacenter_id,
            pod_host_id=pod_host_id,
            container_disk_gb=container_disk_gb,
            volume_gb=volume_gb,
        )

    def launch_failed(self, reason: str, detail: str, actor: str, at: datetime) -> None:
        self._require(LAUNCHING, CANCELLING, action="fail the launch of")
        if self.pod_id is not None:
            raise IllegalTransition("the Pod exists; it must be released, not forgotten")
        if self.state == CANCELLING:
            self._trigger(RunCancelled, actor, at, reason=USER_CANCELLED)
        else:
            self._trigger(RunFailed, actor, at, reason=reason, detail=detail)

    # ------------------------------------------------------------ training (R6–R8)
    def start_training(
        self, actor: str, at: datetime, report: dict[str, Any] | None = None
    ) -> None:
        """`report`: the progress the trainer's report that starts it carried, with its key
        (`boot`, `seq`), the channel it came by (`via`) and when it arrived (`received_at`),
        kept in the event: its save is that report's claim (`TrainerCallbacks._progress`)."""
        if self.state == RUNNING and not self.training_started:
            self._trigger(TrainingStarted, actor, at, report=report)

    def start_export(self, actor: str, at: datetime) -> None:
        if self.state == RUNNING:
            self._trigger(ExportStarted, actor, at)

    def record_adapter_exported(
        self, object_key: str, sha256: str, size_bytes: int, actor: str, at: datetime
    ) -> None:
        if self.exported is not None and self.exported["sha256"] == sha256:
            return
        # LAUNCHING: the trainer can report before the worker recorded the Pod (a slow or
        # crashed launch); the report is kept and the Pod is adopted by name before verifying.
        self._require(RUNNING, EXPORTING, LAUNCHING, action="export an adapter for")
        self._trigger(
            AdapterExported, actor, at, object_key=object_key, sha256=sha256, size_bytes=size_bytes
        )

    def record_export_failed(self, reason: str, detail: str, actor: str, at: datetime) -> None:
        if self.stop_reason is not None and self.state in TRAINING | {LAUNCHING}:
            return
        self._require(RUNNING, EXPORTING, LAUNCHING, action="fail the export of")
        self._trigger(ExportFailed, actor, at, reason=reason or EXPORT_FAILED, detail=detail)

    def reach_runtime_limit(self, actor: str, at: datetime) -> None:
        if self.stop_reason is not None and self.state in TRAINING | {VERIFYING}:
            return
        self._require(RUNNING, EXPORTING, VERIFYING, action="stop at the runtime limit")
        self._trigger(RuntimeLimitReached, actor, at)

    def runtime_limit_due(self, now: datetime) -> bool:
        if self.state not in TRAINING | {VERIFYING} or self.started_at is None:
            return False
        limit_s = int(self.config.max_runtime_minutes) * 60
        return (now - self.started_at).total_seconds() >= limit_s

    # ------------------------------------------------------------ verification (R7, R9, R10)
    def record_adapter_verified(
        self, object_key: str, sha256: str, size_bytes: int, actor: str, at: datetime
    ) -> None:
        self._require(VERIFYING, RECOVERING, action="verify the adapter of")
        self._trigger(
            AdapterVerified, actor, at, object_key=object_key, sha256=sha256, size_bytes=size_bytes
        )
        if self.pod_status in (POD_RUNNING, POD_STOPPED):
            self._trigger(PodTerminationRequested, actor, at, intent="release")
        else:
            self._trigger(RunSucceeded, actor, at)

    def record_verification_failed(
        self, reason: str, detail: str, actor: str, at: datetime
    ) -> None:
        self._require(VERIFYING, RECOVERING, action="fail the verification of")
        self._trigger(AdapterVerificationFailed, actor, at, reason=reason, detail=detail)

    # ------------------------------------------------------------ stop and retain (R8, R11)
    def record_pod_stopped(self, reason: str, actor: str, at: datetime) -> None:
        if self.pod_status == POD_STOPPED:
            return
        if self.pod_status != POD_RUNNING:
            raise IllegalTransition(f"the Pod is {self.pod_status}, not running")
        self._trigger(PodStopped, actor, at, reason=reason)

    @property
    def stop_pending(self) -> bool:
        """A stop was decided (export failed, limit, invalid adapter) but not yet done."""
        return (
            self.pod_status == POD_RUNNING
            and self.stop_reason is not None
            and (self.state in TRAINING | {VERIFYING, NEEDS_RECOVERY})
        )

    def record_pod_resumed(
        self, cost_per_hour: Decimal, pod_host_id: str | None, actor: str, at: datetime
    ) -> None:
        if self.pod_status == POD_RUNNING:
            return
        self._require(NEEDS_RECOVERY, CANCELLED, FAILED, action="resume the Pod of")
        if self.pod_status != POD_STOPPED:
            raise IllegalTransition(f"the Pod is {self.pod_status}; only a stopped Pod resumes")
        self._trigger(PodResumed, actor, at, cost_per_hour=cost_per_hour, pod_host_id=pod_host_id)

    def ensure_resumable(self) -> None:
        self._require(NEEDS_RECOVERY, CANCELLED, FAILED, action="resume the Pod of")
        if self.pod_status != POD_STOPPED:
            raise IllegalTransition(f"the Pod is {self.pod_status}; only a stopped Pod resumes")

    def ensure_recoverable(self) -> None:
        self._require(NEEDS_RECOVERY, action="recover")

    def request_recovery(
        self,
        method: str,
        object_key: str,
        sha256: str | None,
        size_bytes: int | None,
        actor: str,
        at: datetime,
    ) -> None:
        self.ensure_recoverable()
        if self.pod_status not in (POD_STOPPED, POD_RUNNING):
            raise IllegalTransition("the Pod holding the adapter is gone")
        self._trigger(
            RecoveryRequested,
            actor,
            at,
            method=method,
            object_key=object_key,
            sha256=sha256,
            size_bytes=size_bytes,
        )

    # ------------------------------------------------------------ release and cancel (R12, R13)
    def request_release(self, confirm_delete_unverified: bool, actor: str, at: datetime) -> None:
        if self.pod_status in (POD_TERMINATING, POD_NEEDS_MANUAL):
            return
        if self.pod_status not in (POD_RUNNING, POD_STOPPED):
            raise IllegalTransition(f"there is no Pod to release (Pod is {self.pod_status})")
        self._require(NEEDS_RECOVERY, CANCELLED, FAILED, SUCCEEDED, action="release the Pod of")
        if self.adapter is None and not confirm_delete_unverified:
            raise UnverifiedRelease(
                "the adapter of this run is not verified: releasing the Pod deletes the only "
                "copy of its files; confirm with confirm_delete_unverified: true"
            )
        self._trigger(PodTerminationRequested, actor, at, intent="release")

    def cancel(self, actor: str, at: datetime) -> None:
        """R12: cancel in any live state; the Pod is terminated, or kept when it holds the work."""
        if self.state in TERMINAL:
            raise IllegalTransition(f"the run is already {self.state}")
        if self.state == CANCELLING:
            return
        if self.state == DRAFT:
            self._trigger(RunCancelled, actor, at, reason=USER_CANCELLED)
        elif self.state in (NEEDS_RECOVERY, RECOVERING):
            # The stopped Pod holds the only copy of the work: keep it, visible in cleanup.
            self._trigger(RunCancelled, actor, at, reason=USER_CANCELLED)
        elif self.state == RELEASING:
            raise IllegalTransition("the Pod is already being released")
        else:
            self._trigger(PodTerminationRequested, actor, at, intent="cancel")

    # ------------------------------------------------------------ termination (K2, K3)
    def record_termination_failed(
        self, error: str, max_attempts: int, actor: str, at: datetime
    ) -> None:
        if self.pod_status not in (POD_TERMINATING, POD_NEEDS_MANUAL):
            raise IllegalTransition(f"no termination in progress (Pod is {self.pod_status})")
        self._trigger(
            PodTerminationFailed,
            actor,
            at,
            error=error,
            attempt=self.termination_attempts + 1,
            needs_manual=self.termination_attempts + 1 >= max_attempts,
        )

    def record_pod_terminated(self, actor: str, at: datetime) -> None:
        """K2: only called once RunPod no longer lists the Pod."""
        if self.pod_status in (POD_TERMINATED, POD_GONE):
            return
        if self.pod_status not in (POD_TERMINATING, POD_NEEDS_MANUAL):
            raise IllegalTransition(f"termination was not requested (Pod is {self.pod_status})")
        self._trigger(PodTerminated, actor, at, pod_id=self.pod_id or "")
        self._finish(actor, at)

    def record_pod_vanished(self, actor: str, at: datetime) -> None:
        """K2: RunPod no longer knows a Pod we did not terminate (console delete, $0 balance)."""
        if self.pod_status not in POD_LIVE:
            return
        if self.pod_status in (POD_TERMINATING, POD_NEEDS_MANUAL):
            self.record_pod_terminated(actor, at)
            return
        self._trigger(PodVanished, actor, at, pod_id=self.pod_id or "")
        if self.state not in TERMINAL:
            self._trigger(
                RunFailed, actor, at, reason=POD_VANISHED, detail="RunPod no longer lists the Pod"
            )

    def _finish(self, actor: str, at: datetime) -> None:
        if self.state in TERMINAL:
            return
        if self.termination_intent == "cancel" or self.state == CANCELLING:
            self._trigger(RunCancelled, actor, at, reason=USER_CANCELLED)
        elif self.adapter is not None:
            self._trigger(RunSucceeded, actor, at)
        else:
            self._trigger(
                RunFailed,
                actor,
                at,
                reason=RELEASED_UNVERIFIED,
                detail="the Pod was released without a verified adapter",
            )

    # ------------------------------------------------------------ helpers
    def _require(
        self, *states: str, action: str, problem: type[Conflict] = IllegalTransition
    ) -> None:
        if self.state not in states:
            raise problem(f"cannot {action} a run that is {self.state}", state=self.state)

    @property
    def live_pod(self) -> bool:
        return self.pod_status in POD_LIVE


def _enter(aggregate: Run, state: str, reason: str | None = None) -> None:
    aggregate.state, aggregate.state_reason = state, reason
    aggregate.history = [*aggregate.history, state]


@topic("tensorant.RunDrafted")
class RunDrafted(Run.Created):
    org_id: str
    config: dict[str, Any]

    def apply(self, aggregate: Run) -> None:
        aggregate.org_id, aggregate.config = self.org_id, RunConfig.from_dict(self.config)
        aggregate.history = []
        _enter(aggregate, DRAFT)
        aggregate.accepted_price = aggregate.price_per_hour = None
        aggregate.pod_id = aggregate.pod_name = aggregate.pod_host_id = None
        aggregate.pod_status = POD_NONE
        aggregate.datacenter_id = None
        aggregate.started_at = aggregate.ended_at = None
        aggregate.training_started = False
        aggregate.started_by = None
        aggregate.stop_reason = aggregate.termination_intent = aggregate.last_error = None
        aggregate.termination_attempts = 0
        aggregate.exported = aggregate.adapter = None


@topic("tensorant.RunDraftUpdated")
class RunDraftUpdated(Run.Event):
    config: dict[str, Any]

    def apply(self, aggregate: Run) -> None:
        aggregate.config = RunConfig.from_dict(self.config)


@topic("tensorant.RunDiscarded")
class RunDiscarded(Run.Event):
    def apply(self, aggregate: Run) -> None:
        _enter(aggregate, DISCARDED)


@topic("tensorant.LaunchConfirmed")
class LaunchConfirmed(Run.Event):
    accepted_price: Decimal
    quoted_price: Decimal
    datacenter_id: str | None

    def apply(self, aggregate: Run) -> None:
        aggregate.accepted_price = self.accepted_price
        aggregate.datacenter_id = self.datacenter_id
        _enter(aggregate, LAUNCHING)


@topic("tensorant.LaunchRejected")
class LaunchRejected(Run.Event):
    reason: str
    detail: str

    def apply(self, aggregate: Run) -> None:
        aggregate.state_reason = self.reason


@topic("tensorant.PodLaunched")
class PodLaunched(Run.Event):
    pod_id: str
    pod_name: str
    cost_per_hour: Decimal
    datacenter_id: str | None
    pod_host_id: str | None
    container_disk_gb: int
    volume_gb: int

    def apply(self, aggregate: Run) -> None:
        aggregate.pod_id, aggregate.pod_name = self.pod_id, self.pod_name
        aggregate.price_per_hour = self.cost_per_hour
        aggregate.datacenter_id = self.datacenter_id or aggregate.datacenter_id
        aggregate.pod_host_id = self.pod_host_id
        # A cancel that came before the Pod was recorded asked for its termination already.
        cancelled = aggregate.state == CANCELLING
        aggregate.pod_status = POD_TERMINATING if cancelled else POD_RUNNING
        aggregate.started_at = self.timestamp
        if aggregate.state == LAUNCHING:
            _enter(aggregate, RUNNING)


@topic("tensorant.TrainingStarted")
class TrainingStarted(Run.Event):
    # Events recorded before reports were kept here have no `report`: the class's None
    report: dict[str, Any] | None = None

    def apply(self, aggregate: Run) -> None:
        aggregate.training_started = True
        aggregate.started_by = self.report


@topic("tensorant.ExportStarted")
class ExportStarted(Run.Event):
    def apply(self, aggregate: Run) -> None:
        _enter(aggregate, EXPORTING)


@topic("tensorant.AdapterExported")
class AdapterExported(Run.Event):
    object_key: str
    sha256: str
    size_bytes: int

    def apply(self, aggregate: Run) -> None:
        aggregate.exported = {
            "object_key": self.object_key,
            "sha256": self.sha256,
            "size_bytes": self.size_bytes,
        }
        _enter(aggregate, VERIFYING)


@topic("tensorant.ExportFailed")
class ExportFailed(Run.Event):
    reason: str
    detail: str

    def apply(self, aggregate: Run) -> None:
        aggregate.stop_reason = EXPORT_FAILED
        aggregate.state_reason = EXPORT_FAILED


@topic("tensorant.RuntimeLimitReached")
class RuntimeLimitReached(Run.Event):
    def apply(self, aggregate: Run) -> None:
        aggregate.stop_reason = RUNTIME_LIMIT
        aggregate.state_reason = RUNTIME_LIMIT


@topic("tensorant.AdapterVerified")
class AdapterVerified(Run.Event):
    object_key: str
    sha256: str
    size_bytes: int

    def apply(self, aggregate: Run) -> None:
        aggregate.adapter = {
            "object_key": self.object_key,
            "sha256": self.sha256,
            "size_bytes": self.size_bytes,
            "verified_at": self.timestamp,
        }
        _enter(aggregate, RELEASING)


@topic("tensorant.AdapterVerificationFailed")
class AdapterVerificationFailed(Run.Event):
    reason: str
    detail: str

    def apply(self, aggregate: Run) -> None:
        reason = self.reason or ADAPTER_INVALID  # each defect its own code (R7)
        if aggregate.pod_status == POD_RUNNING and aggregate.state == VERIFYING:
            aggregate.stop_reason = reason
            aggregate.state_reason = reason
        else:
            _enter(aggregate, NEEDS_RECOVERY, reason)


@topic("tensorant.PodStopped")
class PodStopped(Run.Event):
    reason: str

    def apply(self, aggregate: Run) -> None:
        aggregate.pod_status = POD_STOPPED
        if aggregate.state in TRAINING | {VERIFYING, LAUNCHING}:
            _enter(aggregate, NEEDS_RECOVERY, self.reason)
        aggregate.stop_reason = None


@topic("tensorant.PodResumed")
class PodResumed(Run.Event):
    cost_per_hour: Decimal
    pod_host_id: str | None

    def apply(self, aggregate: Run) -> None:
        aggregate.pod_status = POD_RUNNING
        aggregate.price_per_hour = self.cost_per_hour
        aggregate.pod_host_id = self.pod_host_id or aggregate.pod_host_id


@topic("tensorant.RecoveryRequested")
class RecoveryRequested(Run.Event):
    method: str
    object_key: str
    sha256: str | None
    size_bytes: int | None

    def apply(self, aggregate: Run) -> None:
        _enter(aggregate, RECOVERING, aggregate.state_reason)


@topic("tensorant.PodTerminationRequested")
class PodTerminationRequested(Run.Event):
    intent: str  # release | cancel

    def apply(self, aggregate: Run) -> None:
        aggregate.termination_intent = self.intent
        if aggregate.pod_status in (POD_RUNNING, POD_STOPPED) or aggregate.pod_id is None:
            aggregate.pod_status = POD_TERMINATING if aggregate.pod_id else aggregate.pod_status
        if aggregate.state not in TERMINAL:
            _enter(
                aggregate,
                CANCELLING if self.intent == "cancel" else RELEASING,
                USER_CANCELLED if self.intent == "cancel" else aggregate.state_reason,
            )


@topic("tensorant.PodTerminationFailed")
class PodTerminationFailed(Run.Event):
    error: str
    attempt: int
    needs_manual: bool

    def apply(self, aggregate: Run) -> None:
        aggregate.termination_attempts = self.attempt
        aggregate.last_error = self.error
        if self.needs_manual:
            aggregate.pod_status = POD_NEEDS_MANUAL


@topic("tensorant.PodTerminated")
class PodTerminated(Run.Event):
    pod_id: str

    def apply(self, aggregate: Run) -> None:
        aggregate.pod_status = POD_TERMINATED


@topic("tensorant.PodVanished")
class PodVanished(Run.Event):
    pod_id: str

    def apply(self, aggregate: Run) -> None:
        aggregate.pod_status = POD_GONE


@topic("tensorant.RunSucceeded")
class RunSucceeded(Run.Event):
    def apply(self, aggregate: Run) -> None:
        _enter(aggregate, SUCCEEDED)
        aggregate.ended_at = self.timestamp


@topic("tensorant.RunFailed")
class RunFailed(Run.Event):
    reason: str
    detail: str

    def apply(self, aggregate: Run) -> None:
        _enter(aggregate, FAILED, self.reason)
        aggregate.ended_at = self.timestamp


@topic("tensorant.RunCancelled")
class RunCancelled(Run.Event):
    reason: str

    def apply(self, aggregate: Run) -> None:
        _enter(aggregate, CANCELLED, self.reason)
        aggregate.ended_at = self.timestamp


class NotADraft(Conflict):
    problem = "not-a-draft"
    title = "Only a draft can be launched"


class UnverifiedRelease(Conflict):
    problem = "unverified-release"
    title = "Releasing would delete the only copy of the adapter"


class RecoveryNotPossible(Conflict):
    problem = "recovery-not-possible"
    title = "This recovery path does not fit the run's storage"
