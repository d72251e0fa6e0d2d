"""Training runs: user commands (R1–R13) and trainer callbacks; the reactor is in reactor.py."""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from application.reactor import RunReactor, adapter_key
from application.reconcile import ReconcileCommands
from domain.base import SYSTEM
from domain.errors import Conflict, DomainError, NotFound, TensorantError
from domain.rates import money
from domain.run import (
    TRAINING,
    NotADraft,
    Run,
    ensure_offered_in_datacenter,
)
from domain.storage import RUNPOD_VOLUME

if TYPE_CHECKING:
    from application.service import TensorantApp

log = logging.getLogger("tensorant.runs")
TRAINER = "trainer"


@dataclass(frozen=True)
class RunSettings:
    trainer_image: str = "tensorant/trainer:1.0"
    public_url: str = "http://127.0.0.1:8000"
    trainer_secret: bytes = field(default=b"", repr=False)
    container_disk_gb: int = 20
    local_volume_gb: int = 50  # custom S3: local working storage on the Pod
    max_termination_attempts: int = 5
    termination_backoff_s: float = 5.0
    max_backoff_s: float = 300.0
    account_refresh_interval_s: float = 60.0


class RunLocks(Protocol):
    """Mutual exclusion per run across the processes that drive runs."""

    def hold(self, run_id: str) -> AbstractContextManager[None]: ...


class LocalLocks:
    """One process (the embedded default): a lock per run id."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    @contextmanager
    def hold(self, run_id: str) -> Iterator[None]:
        with self._guard:
            lock = self._locks.setdefault(run_id, threading.Lock())
        with lock:
            yield


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

    def org_ids(self) -> list[str]:
        """Organizations with a connected RunPod account (the reconciler lists their Pods)."""
        ...

    def reconciled(self, at: datetime, organizations: int) -> None:
        """Record that a complete reconcile pass ended at `at`."""
        ...


class NoRuns:
    def live_runs(self) -> list[tuple[str, str]]:
        return []

    def live_pods(self, org_id: str) -> int:
        return 0

    def org_ids(self) -> list[str]:
        return []

    def reconciled(self, at: datetime, organizations: int) -> None:
        return None


class ConfirmationRequired(DomainError):
    problem = "confirmation-required"
    title = "The request needs an explicit confirmation"


class AvailabilityChanged(Conflict):
    problem = "availability-changed"
    title = "The GPU is no longer available as configured"


class PriceAboveLimit(Conflict):
    problem = "price-above-limit"
    title = "The current price is above the run's price limit"


class PriceChanged(Conflict):
    problem = "price-changed"
    title = "The price changed since you confirmed it"


class LowBalance(Conflict):
    problem = "low-balance"
    title = "The RunPod balance does not cover one hour of the Pod"


class RecoveryNotPossible(Conflict):
    problem = "recovery-not-possible"
    title = "This recovery path does not fit the run's storage"


class InvalidTrainerToken(NotFound):
    problem = "not-found"


class RunCommands(RunReactor, ReconcileCommands):
    """Mixed into TensorantApp; `self` is the application."""

    run_settings: RunSettings
    run_index: RunIndex
    run_locks: RunLocks

    # ------------------------------------------------------------ drafts (R1–R3)
    def _check_config(self: TensorantApp, org_id: str, config: dict[str, Any]) -> None:
        project = self.project(org_id, str(config.get("project_id")))
        if str(config.get("dataset_version_id")) not in project.datasets:
            raise NotFound(
                f"dataset version {config.get('dataset_version_id')} not found in the project"
            )
        if config.get("kind") == "full" and config.get("baseline_run_id"):
            base = self.run(org_id, str(config["baseline_run_id"]))
            if base.state != "succeeded" or base.config["project_id"] != config["project_id"]:
                raise DomainError(
                    "the baseline must be a succeeded run of the same project", rule="baseline"
                )
        Run.draft(org_id, config, SYSTEM, self.clock.now())  # the domain rules, nothing saved
        self._check_datacenter(org_id, config)

    def _check_datacenter(self: TensorantApp, org_id: str, config: dict[str, Any]) -> None:
        """R2: with a network volume the GPU must be offered in the volume's datacenter."""
        st = self.storage(org_id)
        if st.kind != RUNPOD_VOLUME or self.connection(org_id).status != "connected":
            return
        offers = self.compute.list_gpus(self.runpod_key(org_id), int(config["gpu_count"]))
        offer = next((o for o in offers if o.id == config["gpu_type_id"]), None)
        ensure_offered_in_datacenter(
            str(config["gpu_type_id"]), offer.datacenters if offer else [], st.datacenter_id or ""
        )

    def draft_run(
        self: TensorantApp, org_id: str, actor: str, config: dict[str, Any]
    ) -> tuple[str, int]:
        self._check_config(org_id, config)
        run = Run.draft(org_id, config, actor, self.clock.now())
        return str(run.id), self.save_all(run)

    def update_draft(
        self: TensorantApp, org_id: str, run_id: str, actor: str, config: dict[str, Any]
    ) -> int:
        run = self.run(org_id, run_id)
        run._require("draft", action="edit")
        self._check_config(org_id, config)
        run.update_draft(config, actor, self.clock.now())
        return self.save_all(run)

    def discard_draft(self: TensorantApp, org_id: str, run_id: str, actor: str) -> int:
        run = self.run(org_id, run_id)
        run.discard(actor, self.clock.now())
        return self.save_all(run)

    # ------------------------------------------------------------ launch (R4)
    def launch_run(
        self: TensorantApp,
        org_id: str,
        run_id: str,
        actor: str,
        confirm: bool,
        accepted_price: Decimal | str | None,
    ) -> int:
        run = self.run(org_id, run_id)
        if not confirm or accepted_price is None:
            raise ConfirmationRequired(
                "launching rents a billable GPU: send confirm: true with the hourly price you "
                "accept (accepted_price_per_hour)"
            )
        accepted = money(accepted_price)
        run._require("draft", action="launch", problem=NotADraft)
        self.connection(org_id).ensure_connected()
        st = self.storage(org_id)
        st.ensure_connected()
        key = self.runpod_key(org_id)
        cfg = run.config
        count = int(cfg["gpu_count"])
        offers = self.compute.list_gpus(key, count)
        offer = next((o for o in offers if o.id == cfg["gpu_type_id"]), None)
        datacenter = st.datacenter_id if st.kind == RUNPOD_VOLUME else None
        refusal: TensorantError | None = None
        price = Decimal(0)
        if (
            offer is None
            or not offer.datacenters
            or (datacenter is not None and datacenter not in offer.datacenters)
        ):
            where = f" in {datacenter}" if datacenter else ""
            refusal = AvailabilityChanged(
                f"{cfg['gpu_type_id']} is no longer available{where}; choose another GPU or "
                "try later"
            )
        else:
            price = offer.price_per_hour * count
            limit = money(cfg["price_limit_per_hour"])
            if price > limit:
                refusal = PriceAboveLimit(
                    f"{count} × {offer.id} costs ${price}/hour now, above the limit ${limit}/hour",
                    price_per_hour=str(price),
                    price_limit_per_hour=str(limit),
                )
            elif price > accepted:
                refusal = PriceChanged(
                    f"the price is ${price}/hour now; you accepted ${accepted}/hour — review and "
                    "confirm the new price",
                    price_per_hour=str(price),
                )
            else:
                account = self.compute.check_account(key)
                # An unknown balance (REST v2 after GraphQL's retirement): RunPod's 402 decides.
                if account.balance is not None and account.balance < price:
                    refusal = LowBalance(
                        f"the RunPod balance ${account.balance} does not cover one hour "
                        f"(${price}); RunPod requires that to start a Pod — add credit in "
                        "RunPod → Billing",
                        balance=str(account.balance),
                    )
        at = self.clock.now()
        if refusal is not None:
            run.reject_launch(refusal.problem, refusal.detail, actor, at)
            refusal.position = self.save_all(run)
            raise refusal
        run.confirm_launch(accepted, price, datacenter, actor, at)
        return self.save_all(run)

    # ------------------------------------------------------------ user actions (R9–R13)
    def cancel_run(self: TensorantApp, org_id: str, run_id: str, actor: str) -> int:
        run = self.run(org_id, run_id)
        run.cancel(actor, self.clock.now())
        return self.save_all(run)

    def resume_pod(
        self: TensorantApp, org_id: str, run_id: str, actor: str, confirm_billing: bool
    ) -> int:
        """R11: synchronous so a capacity refusal reaches the user; the Pod then stays stopped."""
        run = self.run(org_id, run_id)
        if not confirm_billing:
            raise ConfirmationRequired(
                "resuming the Pod resumes GPU billing: confirm with confirm_billing: true"
            )
        run.ensure_resumable()
        key = self.runpod_key(org_id)
        pod = self.compute.resume_pod(key, run.pod_id or "", int(run.config["gpu_count"]))
        run.record_pod_resumed(pod.cost_per_hour, pod.pod_host_id, actor, self.clock.now())
        return self.save_all(run)

    def release_pod(
        self: TensorantApp, org_id: str, run_id: str, actor: str, confirm_delete_unverified: bool
    ) -> int:
        run = self.run(org_id, run_id)
        run.request_release(confirm_delete_unverified, actor, self.clock.now())
        return self.save_all(run)

    def recover_from_volume(self: TensorantApp, org_id: str, run_id: str, actor: str) -> int:
        """R9: verify the adapter the trainer saved on the network volume."""
        run = self.run(org_id, run_id)
        if self.storage(org_id).kind != RUNPOD_VOLUME:
            raise RecoveryNotPossible(
                "this organization uses custom S3: retrieve /workspace/data/adapter.zip from the "
                "Pod and upload it with Verify and recover"
            )
        key = (run.exported or {}).get("object_key") or adapter_key(run_id)
        run.request_recovery("volume", key, None, None, actor, self.clock.now())
        return self.save_all(run)

    def recover_from_upload(
        self: TensorantApp, org_id: str, run_id: str, actor: str, data: bytes
    ) -> int:
        """R10: store the uploaded adapter.zip, then verify it like an exported one."""
        run = self.run(org_id, run_id)
        run._require("needs_recovery", action="recover")
        if not data:
            raise DomainError("the uploaded adapter.zip is empty", rule="upload")
        key = f"runs/{run_id}/recovered/adapter.zip"
        loc, creds = self.storage_location(org_id)
        self.objects.put(loc, creds, key, data)
        sha = hashlib.sha256(data).hexdigest()
        run.request_recovery("upload", key, sha, len(data), actor, self.clock.now())
        return self.save_all(run)

    # ------------------------------------------------------------ trainer callbacks
    def trainer_token(self: TensorantApp, run_id: str) -> str:
        """A per-run token: an HMAC of the run id, useless for any other run or endpoint."""
        secret = self.run_settings.trainer_secret or b"tensorant-dev-only"
        return hmac.new(secret, f"trainer:{run_id}".encode(), hashlib.sha256).hexdigest()

    def trainer_run(self: TensorantApp, run_id: str, token: str) -> Run:
        if not hmac.compare_digest(self.trainer_token(run_id), token or ""):
            raise InvalidTrainerToken(f"run {run_id} not found")
        run: Run = self._get(Run, run_id)
        return run

    def trainer_progress(self: TensorantApp, run_id: str, token: str, phase: str) -> int:
        run = self.trainer_run(run_id, token)
        at = self.clock.now()
        run.start_training(TRAINER, at)
        if phase == "exporting":
            run.start_export(TRAINER, at)
        return self.save_all(run) if run.pending_events else 0

    def trainer_exported(
        self: TensorantApp, run_id: str, token: str, object_key: str, sha256: str, size_bytes: int
    ) -> int:
        run = self.trainer_run(run_id, token)
        run.record_adapter_exported(object_key, sha256, size_bytes, TRAINER, self.clock.now())
        return self.save_all(run) if run.pending_events else 0

    def trainer_failed(
        self: TensorantApp, run_id: str, token: str, reason: str, detail: str
    ) -> int:
        run = self.trainer_run(run_id, token)
        if run.state not in TRAINING:
            return 0
        run.record_export_failed(reason or "export_failed", detail[:500], TRAINER, self.clock.now())
        return self.save_all(run) if run.pending_events else 0
