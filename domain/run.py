"""A training run and its Pod (R1–R13): the state machine of the run states (docs/contract.md),
refusing illegal moves.

The run's life cycle is written once, in `advance`: given where a run is (`Lifecycle`: state,
reason, Pod status, ...) and one of its events, it says where the run is next. The events'
`apply` and the run view (projections/views/runs.py) both call it, so the aggregate and what the
API shows cannot decide a transition differently. What a member may do in each state is
`allowed_actions`, from the same state sets the commands refuse outside of."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
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
FOREIGN_ADAPTER_KEY = "foreign_adapter_key"  # N2: an export report naming another object
RELEASED_UNVERIFIED, LAUNCH_FAILED = "released_unverified", "launch_failed"
# No Pod bills unseen (R5, R8): a Pod that never ran the trainer is terminated and its run fails
# with one of these; a trainer silent after it started training is stopped and retained.
IMAGE_UNAVAILABLE, CUDA_UNAVAILABLE = "image_unavailable", "cuda_unavailable"
TRAINER_NEVER_STARTED, TRAINER_STALLED = "trainer_never_started", "trainer_stalled"
BOOT_FAILURES = (IMAGE_UNAVAILABLE, CUDA_UNAVAILABLE, TRAINER_NEVER_STARTED)

# Why a Pod's termination was asked: a release (R13), a cancel (R12), or a Pod that never ran
# the trainer (its run then ends failed with the boot failure's reason, not released_unverified)
RELEASE, CANCEL, FAIL = "release", "cancel", "fail"

# Where each member action is allowed (R9–R13): the commands refuse outside these states, and
# `allowed_actions` shows them as the API's and the console's `actions` flags.
RESUMABLE = (NEEDS_RECOVERY, CANCELLED, FAILED)
RELEASABLE = (NEEDS_RECOVERY, CANCELLED, FAILED, SUCCEEDED)
RECOVERABLE_POD = (POD_STOPPED, POD_RUNNING)  # the Pod holding the adapter still exists
ACTIONS = (
    "edit",
    "delete",
    "launch",
    "cancel",
    "resume",
    "release",
    "recover_verify",
    "recover_upload",
)


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
    base_model_revision: str | None  # R19: pinned at launch (PodLaunched)
    # The trainer's report that started training (`TrainingStarted.report`): its key (boot,
    # seq), the channel it came by and the progress it carried; None before, and for a run
    # whose training was started by a report recorded before reports were kept here.
    started_by: dict[str, Any] | None
    stop_reason: str | None
    termination_intent: str | None
    termination_attempts: int
    last_error: str | None
    exported: dict[str, Any] | None
    # N2: the last `exported` report refused for naming another object (its key and sha256)
    refused_export: dict[str, Any] | None
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
        image: str | None = None,
        trainer_version: str | None = None,
        base_model_revision: str | None = None,
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
            image=image,
            trainer_version=trainer_version,
            base_model_revision=base_model_revision,
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

    def refuse_export_report(
        self, object_key: str, sha256: str, reason: str, actor: str, at: datetime
    ) -> None:
        """N2: the trainer's `exported` report named an object that is not this run's adapter
        (another run's verified adapter, a manifest): nothing is verified from it, and it is
        recorded once per (key, sha256), whichever channel brings it again."""
        refused = getattr(self, "refused_export", None)
        if refused == {"object_key": object_key, "sha256": sha256}:
            return
        self._require(RUNNING, EXPORTING, LAUNCHING, action="refuse an export report of")
        self._trigger(
            ExportReportRefused, actor, at, object_key=object_key, sha256=sha256, reason=reason
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

    # ------------------------------------------------------------ no Pod bills unseen (R5, R8)
    @property
    def booting(self) -> bool:
        """The Pod runs and its trainer has not started training: nothing is written yet, so a
        Pod that gets no further is terminated, not retained."""
        return (
            self.state == RUNNING
            and self.pod_status == POD_RUNNING
            and not self.training_started
            and self.stop_reason is None
        )

    def boot_overdue(
        self, now: datetime, deadline: timedelta, last_report: datetime | None, quiet: timedelta
    ) -> bool:
        """Whether the Pod missed its boot deadline (`deadline` after its creation): no report
        on any channel since, or none for `quiet` (the stall time) after its last boot report."""
        if not self.booting or self.started_at is None or now < self.started_at + deadline:
            return False
        return last_report is None or now - last_report >= quiet

    def stalled(self, now: datetime, last_report: datetime | None, quiet: timedelta) -> bool:
        """Whether a trainer that started training has been silent on every channel for `quiet`
        (the stall time) while its Pod runs: its checkpoints may be the only copy (R8)."""
        if (
            self.state not in TRAINING
            or self.pod_status != POD_RUNNING
            or not self.training_started
            or self.stop_reason is not None
            or self.started_at is None
        ):
            return False
        last = self.started_at if last_report is None else max(last_report, self.started_at)
        return now - last >= quiet

    def fail_boot(self, reason: str, detail: str, actor: str, at: datetime) -> None:
        """The Pod never ran the trainer: it is terminated (nothing was written), confirmed gone
        like every termination (K2, K3), and then the run ends failed with `reason`."""
        if self.state == RELEASING and self.termination_intent == FAIL:
            return  # decided already: a repeated tick, or the reconciler after the reactor
        if not self.booting:
            raise IllegalTransition(
                f"cannot fail the boot of a run that is {self.state} with its Pod "
                f"{self.pod_status}",
                state=self.state,
            )
        self._trigger(BootFailed, actor, at, reason=reason, detail=detail)
        self._trigger(PodTerminationRequested, actor, at, intent=FAIL)

    def record_stalled(self, last_report: datetime | None, actor: str, at: datetime) -> None:
        """R8: the trainer went silent after it started training: stop and retain the Pod."""
        if self.stop_reason is not None and self.state in TRAINING:
            return  # a stop is decided already
        self._require(RUNNING, EXPORTING, action="stop the silent trainer of")
        if self.pod_status != POD_RUNNING:
            raise IllegalTransition(f"the Pod is {self.pod_status}, not running")
        self._trigger(TrainerStalled, actor, at, last_report_at=last_report)

    # ------------------------------------------------------------ verification (R7, R9, R10)
    def record_adapter_verified(
        self,
        object_key: str,
        sha256: str,
        size_bytes: int,
        actor: str,
        at: datetime,
        training: dict[str, Any] | None = None,
    ) -> None:
        self._require(VERIFYING, RECOVERING, action="verify the adapter of")
        self._trigger(
            AdapterVerified,
            actor,
            at,
            object_key=object_key,
            sha256=sha256,
            size_bytes=size_bytes,
            training=training,
        )
        if self.pod_status in (POD_RUNNING, POD_STOPPED):
            self._trigger(PodTerminationRequested, actor, at, intent=RELEASE)
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
        self._require(*RESUMABLE, action="resume the Pod of")
        if self.pod_status != POD_STOPPED:
            raise IllegalTransition(f"the Pod is {self.pod_status}; only a stopped Pod resumes")
        self._trigger(PodResumed, actor, at, cost_per_hour=cost_per_hour, pod_host_id=pod_host_id)

    def ensure_resumable(self) -> None:
        self._require(*RESUMABLE, action="resume the Pod of")
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
        if self.pod_status not in RECOVERABLE_POD:
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
        self._require(*RELEASABLE, action="release the Pod of")
        if self.adapter is None and not confirm_delete_unverified:
            raise UnverifiedRelease(
                "the adapter of this run is not verified: releasing the Pod deletes the only "
                "copy of its files; confirm with confirm_delete_unverified: true"
            )
        self._trigger(PodTerminationRequested, actor, at, intent=RELEASE)

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
            self._trigger(PodTerminationRequested, actor, at, intent=CANCEL)

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
        if self.termination_intent == CANCEL or self.state == CANCELLING:
            self._trigger(RunCancelled, actor, at, reason=USER_CANCELLED)
        elif self.termination_intent == FAIL:
            self._trigger(
                RunFailed,
                actor,
                at,
                reason=self.state_reason or TRAINER_NEVER_STARTED,
                detail="the Pod never ran the trainer; RunPod no longer lists it",
            )
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

    @property
    def lifecycle(self) -> Lifecycle:
        return Lifecycle(
            self.state,
            self.state_reason,
            self.pod_status,
            has_pod=self.pod_id is not None,
            stop_reason=self.stop_reason,
            termination_intent=self.termination_intent,
        )

    @property
    def actions(self) -> frozenset[str]:
        return allowed_actions(self.state, self.pod_status)


def _advance(aggregate: Run, event: Run.Event) -> None:
    """The one way an event moves the aggregate along its life cycle (`advance`)."""
    created = isinstance(event, RunDrafted)
    life = advance(None if created else aggregate.lifecycle, event)
    aggregate.state, aggregate.state_reason = life.state, life.reason
    aggregate.pod_status = life.pod_status
    aggregate.stop_reason, aggregate.termination_intent = life.stop_reason, life.termination_intent
    history = [] if created else aggregate.history
    aggregate.history = [*history, life.state] if life.entered else history


@topic("tensorant.RunDrafted")
class RunDrafted(Run.Created):
    org_id: str
    config: dict[str, Any]

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)
        aggregate.org_id, aggregate.config = self.org_id, RunConfig.from_dict(self.config)
        aggregate.accepted_price = aggregate.price_per_hour = None
        aggregate.pod_id = aggregate.pod_name = aggregate.pod_host_id = None
        aggregate.base_model_revision = None
        aggregate.datacenter_id = None
        aggregate.started_at = aggregate.ended_at = None
        aggregate.training_started = False
        aggregate.started_by = None
        aggregate.last_error = None
        aggregate.termination_attempts = 0
        aggregate.exported = aggregate.adapter = aggregate.refused_export = None


@topic("tensorant.RunDraftUpdated")
class RunDraftUpdated(Run.Event):
    config: dict[str, Any]

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)
        aggregate.config = RunConfig.from_dict(self.config)


@topic("tensorant.RunDiscarded")
class RunDiscarded(Run.Event):
    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)


@topic("tensorant.LaunchConfirmed")
class LaunchConfirmed(Run.Event):
    accepted_price: Decimal
    quoted_price: Decimal
    datacenter_id: str | None

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)
        aggregate.accepted_price = self.accepted_price
        aggregate.datacenter_id = self.datacenter_id


@topic("tensorant.LaunchRejected")
class LaunchRejected(Run.Event):
    reason: str
    detail: str

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)


@topic("tensorant.PodLaunched")
class PodLaunched(Run.Event):
    pod_id: str
    pod_name: str
    cost_per_hour: Decimal
    datacenter_id: str | None
    pod_host_id: str | None
    container_disk_gb: int
    volume_gb: int
    # R19 lineage: the image the Pod runs and the trainer's version (a bundle's, or a baked
    # image's tag); events recorded before they were kept have the class's None
    image: str | None = None
    trainer_version: str | None = None
    # R19: the Hub commit a Hub base model was resolved to and pinned at in the manifest
    base_model_revision: str | None = None

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)
        aggregate.pod_id, aggregate.pod_name = self.pod_id, self.pod_name
        aggregate.base_model_revision = self.base_model_revision
        aggregate.price_per_hour = self.cost_per_hour
        aggregate.datacenter_id = self.datacenter_id or aggregate.datacenter_id
        aggregate.pod_host_id = self.pod_host_id
        aggregate.started_at = self.timestamp


@topic("tensorant.TrainingStarted")
class TrainingStarted(Run.Event):
    # Events recorded before reports were kept here have no `report`: the class's None
    report: dict[str, Any] | None = None

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)
        aggregate.training_started = True
        aggregate.started_by = self.report


@topic("tensorant.ExportStarted")
class ExportStarted(Run.Event):
    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)


@topic("tensorant.AdapterExported")
class AdapterExported(Run.Event):
    object_key: str
    sha256: str
    size_bytes: int

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)
        aggregate.exported = {
            "object_key": self.object_key,
            "sha256": self.sha256,
            "size_bytes": self.size_bytes,
        }


@topic("tensorant.ExportReportRefused")
class ExportReportRefused(Run.Event):
    """N2: an `exported` report named an object outside the run's own adapter keys; the run
    goes on as it was (a later report of its own key is verified as usual)."""

    object_key: str
    sha256: str
    reason: str

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)
        aggregate.refused_export = {"object_key": self.object_key, "sha256": self.sha256}


@topic("tensorant.ExportFailed")
class ExportFailed(Run.Event):
    reason: str
    detail: str

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)


@topic("tensorant.BootFailed")
class BootFailed(Run.Event):
    """The Pod never ran the trainer (R5): no report within the boot deadline, or RunPod said
    its container failed first. `detail`: the Pod's log line that says why, when RunPod kept
    one; the Pod's termination (intent `fail`) follows in the same save."""

    reason: str
    detail: str

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)


@topic("tensorant.TrainerStalled")
class TrainerStalled(Run.Event):
    """The trainer started training, then nothing arrived on any channel for the stall time
    (R8): the Pod is stopped and retained. `last_report_at`: when its last report arrived."""

    last_report_at: datetime | None = None

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)


@topic("tensorant.RuntimeLimitReached")
class RuntimeLimitReached(Run.Event):
    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)


@topic("tensorant.AdapterVerified")
class AdapterVerified(Run.Event):
    object_key: str
    sha256: str
    size_bytes: int
    # R17/R18/R19: the adapter's own record of its training (domain/training_record.py);
    # events recorded before it was kept have the class's None
    training: dict[str, Any] | None = None

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)
        aggregate.adapter = {
            "object_key": self.object_key,
            "sha256": self.sha256,
            "size_bytes": self.size_bytes,
            "verified_at": self.timestamp,
        }


@topic("tensorant.AdapterVerificationFailed")
class AdapterVerificationFailed(Run.Event):
    reason: str
    detail: str

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)


@topic("tensorant.PodStopped")
class PodStopped(Run.Event):
    reason: str

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)


@topic("tensorant.PodResumed")
class PodResumed(Run.Event):
    cost_per_hour: Decimal
    pod_host_id: str | None

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)
        aggregate.price_per_hour = self.cost_per_hour
        aggregate.pod_host_id = self.pod_host_id or aggregate.pod_host_id


@topic("tensorant.RecoveryRequested")
class RecoveryRequested(Run.Event):
    method: str
    object_key: str
    sha256: str | None
    size_bytes: int | None

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)


@topic("tensorant.PodTerminationRequested")
class PodTerminationRequested(Run.Event):
    intent: str  # RELEASE | CANCEL | FAIL

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)


@topic("tensorant.PodTerminationFailed")
class PodTerminationFailed(Run.Event):
    error: str
    attempt: int
    needs_manual: bool

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)
        aggregate.termination_attempts = self.attempt
        aggregate.last_error = self.error


@topic("tensorant.PodTerminated")
class PodTerminated(Run.Event):
    pod_id: str

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)


@topic("tensorant.PodVanished")
class PodVanished(Run.Event):
    pod_id: str

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)


@topic("tensorant.RunSucceeded")
class RunSucceeded(Run.Event):
    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)
        aggregate.ended_at = self.timestamp


@topic("tensorant.RunFailed")
class RunFailed(Run.Event):
    reason: str
    detail: str

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)
        aggregate.ended_at = self.timestamp


@topic("tensorant.RunCancelled")
class RunCancelled(Run.Event):
    reason: str

    def apply(self, aggregate: Run) -> None:
        _advance(aggregate, self)
        aggregate.ended_at = self.timestamp


# ---------------------------------------------------------------- the one life cycle


@dataclass(frozen=True)
class Lifecycle:
    """Where a run is in its life cycle: what its events decide.

    `has_pod`: a Pod was recorded (PodLaunched). `stop_reason`: a stop and retain was decided
    (R8, R11) and is not done yet; `termination_intent`: why the Pod's termination was asked
    (`release`, `cancel`, `fail`). No transition reads these two: the run view keeps neither and
    decides the same state, reason and Pod status. `entered`: the step entered `state` (the
    aggregate's `history` lists every state entered, a re-entry too).
    """

    state: str
    reason: str | None = None
    pod_status: str = POD_NONE
    has_pod: bool = False
    stop_reason: str | None = None
    termination_intent: str | None = None
    entered: bool = False

    def enter(self, state: str, reason: str | None = None) -> Lifecycle:
        return replace(self, state=state, reason=reason, entered=True)


def advance(life: Lifecycle | None, event: Run.Event) -> Lifecycle:  # noqa: PLR0911, PLR0912
    """Where the run is after `event`, from where it was (`life`; None before its first
    event): the one place a transition is decided (the aggregate's events and the run view
    both call it). An event that decides nothing leaves `life` as it was."""
    if life is None or isinstance(event, RunDrafted):
        return Lifecycle(DRAFT, entered=True)
    now = replace(life, entered=False)
    match event:
        case RunDraftUpdated():
            return replace(now, reason=None)  # a refused launch was of the old configuration
        case RunDiscarded():
            return now.enter(DISCARDED)
        case LaunchConfirmed():
            return now.enter(LAUNCHING)
        case LaunchRejected():
            return replace(now, reason=event.reason)
        case PodLaunched():
            # A cancel that came before the Pod was recorded asked for its termination already.
            pod = POD_TERMINATING if now.state == CANCELLING else POD_RUNNING
            now = replace(now, pod_status=pod, has_pod=True)
            # A reason while launching is a stop the trainer's early report asked for (R8).
            return now.enter(RUNNING, now.reason) if now.state == LAUNCHING else now
        case ExportStarted():
            return now.enter(EXPORTING)
        case AdapterExported():
            return now.enter(VERIFYING)
        case ExportReportRefused():
            return now  # recorded; the run goes on as it was (N2)
        case ExportFailed():
            return replace(now, stop_reason=EXPORT_FAILED, reason=EXPORT_FAILED)
        case RuntimeLimitReached():
            return replace(now, stop_reason=RUNTIME_LIMIT, reason=RUNTIME_LIMIT)
        case TrainerStalled():
            return replace(now, stop_reason=TRAINER_STALLED, reason=TRAINER_STALLED)
        case BootFailed():
            return replace(now, reason=event.reason)  # its Pod's termination comes next
        case AdapterVerified():
            return now.enter(RELEASING)
        case AdapterVerificationFailed():
            reason = event.reason or ADAPTER_INVALID  # each defect its own code (R7)
            if now.pod_status == POD_RUNNING and now.state == VERIFYING:
                return replace(now, stop_reason=reason, reason=reason)  # stopped first (R8)
            return now.enter(NEEDS_RECOVERY, reason)
        case PodStopped():
            now = replace(now, pod_status=POD_STOPPED, stop_reason=None)
            if now.state in TRAINING | {VERIFYING, LAUNCHING}:
                return now.enter(NEEDS_RECOVERY, event.reason)
            return now
        case PodResumed():
            return replace(now, pod_status=POD_RUNNING)
        case RecoveryRequested():
            return now.enter(RECOVERING, now.reason)
        case PodTerminationRequested():
            if now.has_pod and now.pod_status in (POD_RUNNING, POD_STOPPED):
                now = replace(now, pod_status=POD_TERMINATING)
            now = replace(now, termination_intent=event.intent)
            if now.state in TERMINAL:
                return now
            if event.intent == CANCEL:
                return now.enter(CANCELLING, USER_CANCELLED)
            return now.enter(RELEASING, now.reason)
        case PodTerminationFailed():
            return replace(now, pod_status=POD_NEEDS_MANUAL) if event.needs_manual else now
        case PodTerminated():
            return replace(now, pod_status=POD_TERMINATED)
        case PodVanished():
            return replace(now, pod_status=POD_GONE)
        case RunSucceeded():
            return now.enter(SUCCEEDED)
        case RunFailed():
            return now.enter(FAILED, event.reason)
        case RunCancelled():
            return now.enter(CANCELLED, event.reason)
    return now  # TrainingStarted: data only


def allowed_actions(state: str, pod_status: str) -> frozenset[str]:
    """What a member may ask of a run in `state` with its Pod in `pod_status` (R1, R9–R13):
    the commands' own rules, shown as flags by the API (`actions`) and the console. A command
    that would change nothing (cancelling a run that is cancelling) is not offered.
    `recover_verify` also needs a network volume (custom S3 recovers by upload)."""
    allowed: set[str] = set()
    if state == DRAFT:
        allowed |= {"edit", "delete", "launch"}
    if state not in TERMINAL and state not in (CANCELLING, RELEASING):
        allowed.add("cancel")
    if state in RESUMABLE and pod_status == POD_STOPPED:
        allowed.add("resume")
    if state in RELEASABLE and pod_status in (POD_RUNNING, POD_STOPPED):
        allowed.add("release")
    if state == NEEDS_RECOVERY and pod_status in RECOVERABLE_POD:
        allowed |= {"recover_verify", "recover_upload"}
    return frozenset(allowed)


class NotADraft(Conflict):
    problem = "not-a-draft"
    title = "Only a draft can be launched"


class UnverifiedRelease(Conflict):
    problem = "unverified-release"
    title = "Releasing would delete the only copy of the adapter"


class RecoveryNotPossible(Conflict):
    problem = "recovery-not-possible"
    title = "This recovery path does not fit the run's storage"
