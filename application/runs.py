"""Training runs: user commands (R1–R13), trainer callbacks, and the level-triggered reactor.

`drive_run` is the only thing a worker message means: load the run, do the one side effect its
state calls for next, save, repeat until nothing is left to do. Running it twice does nothing
more than running it once, so duplicate messages and crashes between two lines are harmless:
every RunPod call is either idempotent (launch by deterministic name) or re-read afterwards.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from eventsourcing.persistence import IntegrityError

from application import errors as app_errors
from application.adapter_check import inspect_adapter
from application.ports import POD_STOPPED, POD_TERMINATED, PodSpec
from application.reconcile import ReconcileCommands
from domain.base import SYSTEM
from domain.errors import Conflict, DomainError, NotFound, TensorantError
from domain.rates import money
from domain.run import (
    CANCELLING,
    LAUNCHING,
    POD_NEEDS_MANUAL,
    POD_TERMINATING,
    RECOVERING,
        TRAINING,
    VERIFYING,
    Run,
    ensure_offered_in_datacenter,
)
from domain.storage import CUSTOM_S3, RUNPOD_VOLUME

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


def pod_name(run_id: str) -> str:
    """R5: deterministic per run, so a retried launch finds the Pod instead of making another."""
    return f"tensorant-run-{run_id}"


def adapter_key(run_id: str) -> str:
    return f"runs/{run_id}/adapter.zip"


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


class RunCommands(ReconcileCommands):
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
        run._require("draft", action="launch", problem=_not_a_draft())
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
                f"{cfg['gpu_type_id']} is no longer available{where}; choose another GPU or try later"
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
            refusal.position = self.save_all(run)  # type: ignore[attr-defined]
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

    # ------------------------------------------------------------ the reactor
    def drive_run(self: TensorantApp, run_id: str, max_steps: int = 8) -> None:
        """Do what the run's state calls for next until nothing is left (idempotent).

        One driver per run at a time (the lock); a save that lost a race with a user command
        just reloads and looks again. A provider error also compares the organization's Pods
        with RunPod (K2: after every error), outside the run's lock, then propagates so the
        actor retries.
        """
        org_id = ""
        try:
            with self.run_locks.hold(run_id):
                for _ in range(max_steps):
                    run: Run = self._get(Run, run_id)
                    org_id = run.org_id
                    try:
                        if not self._step(run):
                            return
                    except IntegrityError:
                        log.info("run %s changed while driving it; looking again", run_id)
        except app_errors.ProviderError:
            if org_id:
                self.reconcile_after_error(org_id)
            raise

    def _step(self: TensorantApp, run: Run) -> bool:
        """One side effect; True when something was saved (so look again)."""
        org_id = run.org_id
        if run.state in (LAUNCHING, CANCELLING, VERIFYING) and run.pod_id is None:
            return self._launch(run)  # VERIFYING: the trainer reported before we recorded the Pod
        if (
            run.state == VERIFYING
            and run.exported is not None
            and run.adapter is None
            and run.stop_reason is None
        ):
            return self._verify(
                run, run.exported["object_key"], run.exported["sha256"], run.exported["size_bytes"]
            )
        if run.state == RECOVERING:
            req = self._last_recovery(run)
            return self._verify(run, req["object_key"], req.get("sha256"), req.get("size_bytes"))
        if run.runtime_limit_due(self.clock.now()) and run.stop_reason is None:
            run.reach_runtime_limit(SYSTEM, self.clock.now())
            self.save_all(run)
            return True
        if run.stop_pending:
            return self._stop(run)
        if run.pod_status in (POD_TERMINATING, POD_NEEDS_MANUAL):
            return self._terminate(run, org_id)
        return False

    def _launch(self: TensorantApp, run: Run) -> bool:
        org_id, run_id = run.org_id, str(run.id)
        key = self.runpod_key(org_id)
        name = pod_name(run_id)
        at = self.clock.now()
        if run.state == CANCELLING:
            # A create may have happened before the crash or the cancel: find it, or stop here.
            found = self.compute.find_pod_by_name(key, name)
            if found is None:
                run.launch_failed("user_cancelled", "", SYSTEM, at)
                self.save_all(run)
                return True
            pod = found
        elif run.state == VERIFYING:
            # The trainer already reported, so the Pod exists: adopt it, never create another
            # (the listing may lag; the next reconcile looks again).
            found = self.compute.find_pod_by_name(key, name)
            if found is None:
                log.info("run %s: its Pod is not listed yet; adopting it later", run_id)
                return False
            pod = found
        else:
            try:
                pod = self.compute.launch_pod(key, self._pod_spec(run, name))
            except (
                app_errors.CapacityUnavailable,
                app_errors.InsufficientBalance,
                app_errors.InsufficientPermissions,
            ) as e:
                run.launch_failed(
                    "capacity" if isinstance(e, app_errors.CapacityUnavailable) else e.problem,
                    e.detail,
                    SYSTEM,
                    at,
                )
                self.save_all(run)
                return True
        # Record the Pod id the moment RunPod returns it, before any wait.
        run.record_pod_launched(
            pod.id,
            name,
            pod.cost_per_hour,
            pod.datacenter_id,
            pod.pod_host_id,
            pod.container_disk_gb or self.run_settings.container_disk_gb,
            pod.volume_gb,
            SYSTEM,
            at,
        )
        conn = self.connection(org_id)
        conn.record_write_use("launch", conn.key_fingerprint or "", SYSTEM, at)
        self.save_all(run, conn)
        log.info("run %s launched pod %s", run_id, pod.id)
        return True

    def _pod_spec(self: TensorantApp, run: Run, name: str) -> PodSpec:
        run_id = str(run.id)
        st = self.storage(run.org_id)
        cfg = run.config
        env = {
            "TENSORANT_RUN_ID": run_id,
            "TENSORANT_RUN_TOKEN": self.trainer_token(run_id),
            "TENSORANT_CALLBACK_URL": self.run_settings.public_url.rstrip("/"),
            "TENSORANT_STORAGE_KIND": st.kind or "",
            "TENSORANT_ADAPTER_KEY": adapter_key(run_id),
            "TENSORANT_BASE_MODEL": str(cfg["base_model"]),
            "TENSORANT_RUN_KIND": str(cfg["kind"]),
        }
        if st.kind == CUSTOM_S3:
            loc, creds = self.storage_location(run.org_id)
            # The trainer gets a presigned URL for one object, never the key pair.
            env["TENSORANT_ADAPTER_UPLOAD_URL"] = self.objects.presign_put(
                loc, creds, adapter_key(run_id), int(cfg["max_runtime_minutes"]) * 60 + 3600
            )
        return PodSpec(
            name=name,
            image=self.run_settings.trainer_image,
            gpu_type_id=str(cfg["gpu_type_id"]),
            gpu_count=int(cfg["gpu_count"]),
            env=env,
            datacenter_id=run.datacenter_id,
            network_volume_id=st.volume_id if st.kind == RUNPOD_VOLUME else None,
            allowed_cuda_versions=("13.0",),
            container_disk_gb=self.run_settings.container_disk_gb,
            volume_gb=0 if st.kind == RUNPOD_VOLUME else self.run_settings.local_volume_gb,
        )

    def _last_recovery(self: TensorantApp, run: Run) -> dict[str, Any]:
        for event in reversed(list(self.repository.event_store.get(run.id))):
            if type(event).__name__ == "RecoveryRequested":
                return {
                    "object_key": event.object_key,
                    "sha256": event.sha256,
                    "size_bytes": event.size_bytes,
                }
        return {"object_key": adapter_key(str(run.id))}

    def _verify(
        self: TensorantApp, run: Run, key: str, sha256: str | None, size: int | None
    ) -> bool:
        """R7: exists, size and sha256 match, readable zip with config and weights."""
        loc, creds = self.storage_location(run.org_id)
        at = self.clock.now()
        info = self.objects.head(loc, creds, key)
        problem: tuple[str, str] | None
        data = b""
        if info is None:
            problem = ("adapter_invalid", f"{key} does not exist in storage")
        else:
            data = self.objects.get(loc, creds, key)
            problem = inspect_adapter(data, sha256, size)
        if problem is None:
            run.record_adapter_verified(
                key, hashlib.sha256(data).hexdigest(), len(data), SYSTEM, at
            )
            log.info("run %s adapter verified (%s)", run.id, key)
        else:
            run.record_verification_failed(problem[0], problem[1], SYSTEM, at)
            log.info("run %s adapter refused: %s", run.id, problem[1])
        self.save_all(run)
        return True

    def _stop(self: TensorantApp, run: Run) -> bool:
        """R8: stop (not terminate) so the Pod's files are retained; re-read on errors."""
        key = self.runpod_key(run.org_id)
        pod_id = run.pod_id or ""
        try:
            self.compute.stop_pod(key, pod_id)
        except app_errors.ProviderError as e:
            pod = self.compute.get_pod(key, pod_id)
            if pod is None or pod.status != POD_STOPPED:
                log.warning("stop of pod %s for run %s failed: %s", pod_id, run.id, e.detail)
                raise
        run.record_pod_stopped(run.stop_reason or "export_failed", SYSTEM, self.clock.now())
        self.save_all(run)
        log.info("run %s pod %s stopped and retained (%s)", run.id, pod_id, run.state_reason)
        return True

    def _terminate(self: TensorantApp, run: Run, org_id: str) -> bool:
        """K2/K3: terminate, then confirm only when RunPod no longer lists the Pod."""
        key = self.runpod_key(org_id)
        pod_id = run.pod_id or ""
        now = self.clock.now()
        if run.termination_attempts and not self._backoff_elapsed(run, now):
            return False
        error = ""
        try:
            self.compute.terminate_pod(key, pod_id)
        except app_errors.ProviderError as e:
            error = e.detail
        try:
            pod = self.compute.get_pod(key, pod_id)
            still_listed = pod is not None and pod.status != POD_TERMINATED
        except app_errors.ProviderError as e:
            still_listed, error = True, error or e.detail
        if still_listed:
            if run.pod_status == POD_NEEDS_MANUAL:
                return False
            run.record_termination_failed(
                error or "RunPod still lists the Pod",
                self.run_settings.max_termination_attempts,
                SYSTEM,
                now,
            )
            self.save_all(run)
            log.warning(
                "run %s pod %s termination attempt %d failed: %s",
                run.id,
                pod_id,
                run.termination_attempts,
                error or "still listed",
            )
            return False
        adapter_ok = run.adapter is not None
        run.record_pod_terminated(SYSTEM, now)
        conn = self.connection(org_id)
        if adapter_ok:
            conn.record_write_use("release", conn.key_fingerprint or "", SYSTEM, now)
        self.save_all(run, conn)
        log.info("run %s pod %s terminated (confirmed: no longer listed)", run.id, pod_id)
        return True

    def _backoff_elapsed(self: TensorantApp, run: Run, now: datetime) -> bool:
        s = self.run_settings
        wait = min(s.max_backoff_s, s.termination_backoff_s * 2 ** (run.termination_attempts - 1))
        last = run.modified_on
        return now - last >= timedelta(seconds=wait)


def _not_a_draft() -> type[Conflict]:
    from domain.run import NotADraft  # noqa: PLC0415 - keeps the import list short

    return NotADraft


__all__ = ["RECOVERING", "RunCommands", "RunIndex", "RunSettings", "pod_name"]
