"""The reconciler (K1–K3): compare the model with what RunPod lists, level-triggered.

Per organization, RunPod's Pods are listed once, then
- a run's Pod that RunPod no longer knows is recorded (`PodVanished`, or `PodTerminated` when a
  termination was pending, needs_manual included) — absence from the list is confirmed with a
  direct read first, because new Pods can lag in list results;
- a Pod with our naming (`tensorant-run-<run id>`) that no live run owns is an orphan
  (`OrphanPodFound` on the organization's `OrphanPods` aggregate), after a direct re-read so a
  Pod terminated a moment ago is not reported; a run still launching is not an owner-less Pod:
  its launch adopts the Pod by name;
- a run's Pod stopped by RunPod itself while the run trains is recorded stopped and retained:
  at the runtime limit (RunPod's `stopAfter` backstop, a worker down past it) as
  `runtime_limit`, else as a crashed trainer;
- a run's Pod whose container RunPod says failed (`error`) before training started never ran
  the trainer: its boot fails (`BootWatch`: terminated, then the run failed with the reason its
  logs give); after training started, it is a crashed trainer, stopped and retained;
- orphans whose release was requested are terminated with backoff and confirmed only when RunPod
  no longer lists them; unknown RunPod statuses are kept as `unknown` and never crash anything.
Every decision is one structured log line with the organization, run and Pod ids. Driving the
live runs first, on the clock's tick, is the reactor's part (`Reactor.reconcile_tick`).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar

from eventsourcing.persistence import IntegrityError

from application import errors
from application.conflicts import retry_on_conflict
from application.connections import ConnectionService
from application.log import TensorantLog
from application.mailbox import MailboxReader
from application.pods import terminate_and_look
from application.ports import (
    POD_ERROR,
    POD_STOPPED,
    POD_TERMINATED,
    POD_UNKNOWN,
    Clock,
    ComputeProvider,
    PodInfo,
    RunIndex,
    RunLocks,
)
from application.run_settings import RunSettings
from application.watchdog import BootWatch
from domain.base import SYSTEM
from domain.errors import NotFound
from domain.orphans import ORPHAN_NEEDS_MANUAL, ORPHAN_TERMINATING, OrphanPods, run_id_of
from domain.run import (
    CANCELLING,
    LAUNCHING,
    POD_LIVE,
    POD_NEEDS_MANUAL,
    POD_RUNNING,
    POD_TERMINATING,
    TRAINER_CRASHED,
    TRAINER_NEVER_STARTED,
    Run,
)

log = logging.getLogger("tensorant.reconcile")
AFTER_ERROR_GAP_S = 2.0  # at most one reconcile per organization this often after errors


def decision(what: str, org_id: str, run_id: str | None, pod_id: str | None, **extra: Any) -> None:
    """One structured log line per reconciler decision."""
    fields = {"decision": what, "org_id": org_id, "run_id": run_id, "pod_id": pod_id, **extra}
    log.info(
        "reconcile %s org=%s run=%s pod=%s %s",
        what,
        org_id,
        run_id,
        pod_id,
        " ".join(f"{k}={v}" for k, v in extra.items()),
        extra=fields,
    )


@dataclass(frozen=True)
class Reconciler:
    log: TensorantLog
    compute: ComputeProvider
    clock: Clock
    settings: RunSettings
    locks: RunLocks
    runs: RunIndex
    connections: ConnectionService
    mailbox: MailboxReader | None = None  # reports read from storage
    boot: BootWatch | None = None  # R5: a failed boot's reason from the Pod's logs
    # Shared by every instance in the process: a burst of errors compares once per gap.
    _after_error: ClassVar[dict[str, float]] = {}
    _after_error_guard: ClassVar[threading.Lock] = threading.Lock()
    _refreshed: ClassVar[dict[str, float]] = {}  # org id -> monotonic time of the last refresh

    # ------------------------------------------------------------ entry points
    def read_mailboxes(self, run_ids: list[str], *, only_due: bool = False) -> None:
        """Each training run's mailbox (level-triggered, idempotent); `only_due`: a pass's,
        of the runs whose reports do not arrive by another channel, or not swept lately."""
        if self.mailbox is None:
            return
        if only_due:
            s = self.settings
            run_ids = self.mailbox.due(run_ids, s.mailbox_quiet_s, s.mailbox_sweep_s)
        for run_id in run_ids:
            try:
                self.mailbox.read(run_id)
            except Exception as e:  # storage trouble: the next tick reads again
                log.warning("reading the mailbox of run %s failed: %s", run_id, e)

    def after_error(self, org_id: str) -> None:
        """K2 "after every error": compare now, at most once per AFTER_ERROR_GAP_S per org."""
        now = time.monotonic()
        with self._after_error_guard:
            if now - self._after_error.get(org_id, -1e9) < AFTER_ERROR_GAP_S:
                return
            self._after_error[org_id] = now
        try:
            self.compare_with_runpod(org_id)
        except Exception as e:  # best effort: the periodic tick covers what this misses
            log.warning("reconcile after an error for organization %s failed: %s", org_id, e)

    def refresh_account_when_due(self, org_id: str) -> None:
        """C1/K1: the card's balance and spend per hour, and so the balance warning, follow
        RunPod's (spending, deposits); read at most every `account_refresh_interval_s`."""
        now = time.monotonic()
        with self._after_error_guard:
            last = self._refreshed.get(org_id, -1e9)
            if now - last < self.settings.account_refresh_interval_s:
                return
            self._refreshed[org_id] = now
        try:
            self.connections.refresh_account(org_id)
        except Exception as e:  # the next refresh tries again; the card keeps its last figures
            log.warning("refreshing the account of organization %s failed: %s", org_id, e)

    def compare_with_runpod(self, org_id: str, run_ids: list[str] | None = None) -> bool:
        """Compare the organization's live runs and orphans with RunPod; True when it listed."""
        if run_ids is None:
            run_ids = [r for o, r in self.runs.live_runs() if o == org_id]
        try:
            key = self.connections.runpod_key(org_id)
        except errors.SecretUnavailable:
            return True  # not connected: nothing at RunPod can be ours
        try:
            listed = {p.id: p for p in self.compute.list_pods(key)}
        except errors.ProviderError as e:
            decision("list_failed", org_id, None, None, error=e.detail[:200])
            return False
        for run_id in run_ids:
            try:
                self._compare_run(run_id, listed, key)
            except IntegrityError:
                log.info("run %s changed while reconciling it; next tick looks again", run_id)
            except Exception as e:
                log.warning("reconcile of run %s failed: %s", run_id, e)
        with self.locks.hold(f"orphans:{org_id}"):
            try:
                self._reconcile_orphans(org_id, listed, key)
            except IntegrityError:
                log.info("orphans of %s changed while reconciling; next tick looks again", org_id)
        return True

    @retry_on_conflict
    def release_orphan(self, org_id: str, pod_id: str, actor: str, confirm: bool) -> int:
        """Terminate an orphan (with confirmation); the reconciler retries until confirmed."""
        orphans = self.log.orphan_pods(org_id)
        if orphans is None:
            raise NotFound(f"orphan Pod {pod_id} not found")
        orphans.request_release(pod_id, confirm, actor, self.clock.now())
        position = self.log.save_all(orphans) if orphans.pending_events else 0
        try:  # a first attempt right away; failures are the reconciler's to retry
            with self.locks.hold(f"orphans:{org_id}"):
                fresh = self.log.orphan_pods(org_id)
                if fresh is not None and fresh.pods[pod_id]["state"] == ORPHAN_TERMINATING:
                    key = self.connections.runpod_key(org_id)
                    self._terminate_orphan(fresh, pod_id, key, self.clock.now())
                    if fresh.pending_events:
                        position = self.log.save_all(fresh)
        except Exception as e:
            log.warning("first termination of orphan %s failed: %s", pod_id, e)
        return position

    # ------------------------------------------------------------ runs
    def _compare_run(self, run_id: str, listed: dict[str, PodInfo], key: str) -> None:
        with self.locks.hold(run_id):
            run = self.log.load(Run, run_id)
            if run.pod_id is None or run.pod_status not in POD_LIVE:
                return
            pod = listed.get(run.pod_id)
            if pod is None or pod.status == POD_TERMINATED:
                pod = self.compute.get_pod(key, run.pod_id)  # the list lags for new Pods
            at = self.clock.now()
            before = run.pod_status
            if pod is None or pod.status == POD_TERMINATED:
                run.record_pod_vanished(SYSTEM, at)
                self.log.save_all(run)
                terminating = before in (POD_TERMINATING, POD_NEEDS_MANUAL)
                decision(
                    "pod_terminated_confirmed" if terminating else "pod_vanished",
                    run.org_id,
                    run_id,
                    run.pod_id,
                    was=before,
                )
            elif pod.status == POD_STOPPED and before == POD_RUNNING:
                if run.stop_reason is None and run.runtime_limit_due(at):
                    run.reach_runtime_limit(SYSTEM, at)  # RunPod's backstop came first (R5)
                run.record_pod_stopped(run.stop_reason or TRAINER_CRASHED, SYSTEM, at)
                self.log.save_all(run)
                decision("pod_stopped", run.org_id, run_id, run.pod_id, reason=run.state_reason)
            elif pod.status == POD_ERROR and before == POD_RUNNING:
                self._container_failed(run, key, at)
                reason = run.state_reason
                decision("container_failed", run.org_id, run_id, run.pod_id, reason=reason)
            elif pod.status == POD_UNKNOWN:
                decision(
                    "status_unknown_kept",
                    run.org_id,
                    run_id,
                    run.pod_id,
                    provider_status=pod.provider_status,
                )

    def _container_failed(self, run: Run, key: str, at: datetime) -> None:
        """RunPod says the Pod's container failed: before training started the Pod never ran
        the trainer (its boot fails at once); after, the trainer crashed (stopped and
        retained, as a Pod that stopped by itself)."""
        if run.booting:
            why = "RunPod says the Pod's container failed before the trainer reported"
            if self.boot is not None:
                self.boot.fail_boot(run, key, why, at)
            else:
                run.fail_boot(TRAINER_NEVER_STARTED, why, SYSTEM, at)
        else:
            run.record_pod_stopped(run.stop_reason or TRAINER_CRASHED, SYSTEM, at)
        self.log.save_all(run)

    # ------------------------------------------------------------ orphans
    def _owned_by_live_run(self, org_id: str, run_id: str, pod_id: str) -> bool:
        """True when a live run owns (or will adopt) the Pod, or another organization's run
        names it (several organizations may share one RunPod account: its owner judges)."""
        try:
            run = self.log.load(Run, run_id)
        except NotFound:
            return False
        if run.org_id != org_id:
            return True
        if run.pod_id == pod_id and run.pod_status in POD_LIVE:
            return True
        # A launch that crashed before recording the Pod: the run adopts it by name (R5).
        return run.pod_id is None and run.state in (LAUNCHING, CANCELLING)

    def _reconcile_orphans(self, org_id: str, listed: dict[str, PodInfo], key: str) -> None:
        orphans = self.log.orphan_pods(org_id)
        at = self.clock.now()
        for pod in listed.values():
            run_id = run_id_of(pod.name)
            if run_id is None or pod.status == POD_TERMINATED:
                continue
            if (orphans is not None and orphans.is_live(pod.id)) or self._owned_by_live_run(
                org_id, run_id, pod.id
            ):
                continue
            fresh = self.compute.get_pod(key, pod.id)  # not one terminated a moment ago
            if (
                fresh is None
                or fresh.status == POD_TERMINATED
                or self._owned_by_live_run(org_id, run_id, pod.id)
            ):
                continue
            orphans = orphans or OrphanPods.open(org_id, SYSTEM, at)
            orphans.record_found(
                fresh.id,
                fresh.name,
                fresh.status or POD_UNKNOWN,
                fresh.cost_per_hour,
                fresh.gpu_type_id,
                fresh.datacenter_id,
                fresh.container_disk_gb,
                fresh.volume_gb,
                fresh.uptime_seconds,
                SYSTEM,
                at,
            )
            decision(
                "orphan_found",
                org_id,
                run_id,
                pod.id,
                status=fresh.status,
                cost_per_hour=str(fresh.cost_per_hour),
            )
        if orphans is None:
            return
        for pod_id, state in orphans.live().items():
            run_id = run_id_of(str(state["name"]))
            if run_id is not None and self._owned_by_live_run(org_id, run_id, pod_id):
                orphans.record_claimed(pod_id, run_id, SYSTEM, at)
                decision("orphan_adopted", org_id, run_id, pod_id)
                continue
            seen: PodInfo | None = listed.get(pod_id)
            if seen is None or seen.status == POD_TERMINATED:
                seen = self.compute.get_pod(key, pod_id)
            if seen is None or seen.status == POD_TERMINATED:
                orphans.record_gone(pod_id, SYSTEM, at)
                decision("orphan_gone", org_id, run_id, pod_id, was=state["state"])
            elif state["state"] == ORPHAN_TERMINATING:
                self._terminate_orphan(orphans, pod_id, key, at)
        if orphans.pending_events:
            self.log.save_all(orphans)

    def _terminate_orphan(self, orphans: OrphanPods, pod_id: str, key: str, now: datetime) -> None:
        """K3 for orphans: terminate with backoff; confirmed only when RunPod no longer lists it."""
        state = orphans.pods[pod_id]
        wait = timedelta(seconds=self.settings.termination_backoff(int(state["attempts"])))
        if now - state["last_attempt_at"] < wait:
            return
        still_listed, error = terminate_and_look(self.compute, key, pod_id)
        run_id = run_id_of(str(state["name"]))
        if still_listed:
            orphans.record_termination_failed(
                pod_id,
                error or "RunPod still lists the Pod",
                self.settings.max_termination_attempts,
                SYSTEM,
                now,
            )
            decision(
                "orphan_termination_failed",
                orphans.org_id,
                run_id,
                pod_id,
                attempt=orphans.pods[pod_id]["attempts"],
                needs_manual=orphans.pods[pod_id]["state"] == ORPHAN_NEEDS_MANUAL,
            )
        else:
            orphans.record_gone(pod_id, SYSTEM, now)
            decision("orphan_terminated_confirmed", orphans.org_id, run_id, pod_id)
