"""The level-triggered reactor: what a worker message about a run means.

`drive_run` loads the run, does the one side effect its state calls for next, saves, and
repeats until nothing is left to do. Running it twice does nothing more than running it once,
so duplicate messages and crashes between two lines are harmless: every RunPod call is either
idempotent (launch by deterministic name, looked up first) or re-read afterwards.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from eventsourcing.persistence import IntegrityError

from application import errors as app_errors
from application.adapter_check import inspect_adapter
from application.ports import POD_STOPPED, POD_TERMINATED, PodSpec
from domain.base import SYSTEM
from domain.run import (
    CANCELLING,
    LAUNCHING,
    POD_NEEDS_MANUAL,
    POD_TERMINATING,
    RECOVERING,
    VERIFYING,
    RecoveryRequested,
    Run,
)
from domain.storage import CUSTOM_S3, RUNPOD_VOLUME

if TYPE_CHECKING:
    from application.service import TensorantApp

log = logging.getLogger("tensorant.runs")


def pod_name(run_id: str) -> str:
    """R5: deterministic per run, so a retried launch finds the Pod instead of making another."""
    return f"tensorant-run-{run_id}"


def adapter_key(run_id: str) -> str:
    return f"runs/{run_id}/adapter.zip"


class RunReactor:
    """Mixed into TensorantApp; `self` is the application."""

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

    def _step(self: TensorantApp, run: Run) -> bool:  # noqa: PLR0911 - one return per state
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
            if isinstance(event, RecoveryRequested):
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

    def terminate_and_look(self: TensorantApp, key: str, pod_id: str) -> tuple[bool, str]:
        """Ask RunPod to terminate, then look: (still listed, error). Only a Pod RunPod no
        longer lists counts as terminated (K2); an answer of success proves nothing."""
        error = ""
        try:
            self.compute.terminate_pod(key, pod_id)
        except app_errors.ProviderError as e:
            error = e.detail
        try:
            pod = self.compute.get_pod(key, pod_id)
        except app_errors.ProviderError as e:
            return True, error or e.detail
        return pod is not None and pod.status != POD_TERMINATED, error

    def _terminate(self: TensorantApp, run: Run, org_id: str) -> bool:
        """K2/K3: terminate, then confirm only when RunPod no longer lists the Pod."""
        key = self.runpod_key(org_id)
        pod_id = run.pod_id or ""
        now = self.clock.now()
        if run.termination_attempts and not self._backoff_elapsed(run, now):
            return False
        still_listed, error = self.terminate_and_look(key, pod_id)
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
