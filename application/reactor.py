"""The level-triggered reactor: what a worker's message means.

`drive_run` (a run's event was recorded) loads the run, does the one side effect its state
calls for next, saves, and repeats until nothing is left to do. `reconcile_tick` (the clock)
drives every live run and then compares each organization with RunPod. Running either twice
does nothing more than running it once, so duplicate messages and crashes between two lines are
harmless: every RunPod call is either idempotent (launch by deterministic name, looked up first)
or re-read afterwards.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from eventsourcing.persistence import IntegrityError

from application import errors
from application.adapter_check import pin_verified
from application.bundle import BundleSource, publish_bundle
from application.connections import ConnectionService
from application.heavy_checks import HeavyChecks
from application.log import TensorantLog
from application.manifests import UrlLifetimes, issue_manifest, revoke_manifest_urls
from application.pods import adapter_key, pod_name, terminate_and_look
from application.ports import (
    POD_STOPPED,
    Clock,
    ComputeProvider,
    ObjectStore,
    PodInfo,
    PodSpec,
    RunIndex,
    RunLocks,
)
from application.reconciler import Reconciler
from application.run_settings import RunSettings
from application.storage import StorageService
from application.trainer_callbacks import TrainerCallbacks
from application.watchdog import BootWatch, Silence
from domain.base import SYSTEM
from domain.run import (
    CANCELLING,
    DRAFT,
    LAUNCHING,
    POD_NEEDS_MANUAL,
    POD_RUNNING,
    POD_TERMINATING,
    RECOVERING,
    TRAINING,
    VERIFYING,
    RecoveryRequested,
    Run,
)
from domain.storage import RUNPOD_VOLUME
from domain.times import iso
from domain.training_record import training_record
from trainer.protocol import ENV_CALLBACK_URL, ENV_MANIFEST, ENV_RUN_ID, ENV_RUN_TOKEN

log = logging.getLogger("tensorant.runs")


@dataclass(frozen=True)
class Reactor:
    log: TensorantLog
    compute: ComputeProvider
    objects: ObjectStore
    clock: Clock
    settings: RunSettings
    locks: RunLocks
    runs: RunIndex
    connections: ConnectionService
    storage: StorageService
    trainer: TrainerCallbacks
    reconciler: Reconciler
    heavy: HeavyChecks  # small adapters are checked in line, large ones aside
    boot: BootWatch  # R5, R8: Pods whose trainer never reports, or stops reporting
    # T1, R5: the trainer bundle a Pod on the public image fetches; used unless the operator
    # names a baked trainer image (settings.trainer_image)
    bundle: BundleSource | None = None
    # N1: when each training run's manifest was last issued, as this process knows
    _issued: dict[str, datetime] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # K2 at scale: the shards whose pass is running in this process (one pass per shard)
    _passing: set[tuple[int, int]] = field(
        default_factory=set, init=False, repr=False, compare=False
    )
    # K2 at scale: runs whose drive waits for the run's lock in this process
    _waiting: set[str] = field(default_factory=set, init=False, repr=False, compare=False)
    _guard: threading.Lock = field(
        default_factory=threading.Lock, init=False, repr=False, compare=False
    )
    # Other level-triggered drivers of an organization on every tick (managed serving, V1).
    org_drivers: list[Callable[[str], None]] = field(default_factory=list)
    # P1: a draft's dataset is counted in tokens for its base model (on a thread of its own)
    after_draft: Callable[[Run], None] | None = None
    # R19: the Hub commit a Hub base model's `main` is at now, for (org, base model); None
    # when the Hub cannot say (HubService.revision)
    hub_revision: Callable[[str, str], str | None] | None = None

    # ------------------------------------------------------------ the clock (K2)
    def reconcile_tick(self, shard: int = 0, shards: int = 1) -> None:
        """Periodic: drive every live run, then compare every connected organization (of the
        share `shard` of `shards`, by organization id). One pass per shard at a time in a
        process (K2 at scale): a tick that finds that pass still running is skipped, where
        passes longer than the interval used to pile up on the actor's threads, each slowing
        the others."""
        with self._guard:
            if (shard, shards) in self._passing:
                log.warning("reconcile pass still running; this tick is skipped")
                return
            self._passing.add((shard, shards))
        try:
            self._reconcile_pass(shard, shards)
        finally:
            with self._guard:
                self._passing.discard((shard, shards))

    def _reconcile_pass(self, shard: int, shards: int) -> None:
        started = time.monotonic()
        by_org: dict[str, list[str]] = {}
        for org_id, run_id in self.runs.live_runs():
            by_org.setdefault(org_id, []).append(run_id)
        live = {run_id for run_ids in by_org.values() for run_id in run_ids}
        for gone in self._issued.keys() - live:
            del self._issued[gone]
        swept = self._swept_now()
        busy = self.runs.busy_org_ids() if swept is not None else set()
        quiet = 0
        for org_id in self.runs.org_ids():
            if org_id in by_org or org_id in busy or swept is None or swept(org_id):
                by_org.setdefault(org_id, [])
            else:
                quiet += 1  # nothing live: compared in its own pass of every few
        if shards > 1:
            by_org = {o: r for o, r in by_org.items() if org_share(o, shards) == shard}
            live = {run_id for run_ids in by_org.values() for run_id in run_ids}

        def one(org_id: str, run_ids: list[str]) -> bool:
            try:
                return self.reconcile_org(org_id, run_ids)
            except Exception:  # one organization's trouble must not stall the others
                log.exception("reconcile of organization %s failed", org_id)
                return False

        threads = max(1, min(self.settings.reconcile_threads, len(by_org)))
        if threads == 1:
            listed = [one(org_id, run_ids) for org_id, run_ids in by_org.items()]
        else:
            with ThreadPoolExecutor(threads, thread_name_prefix="reconcile") as pool:
                listed = list(pool.map(one, by_org.keys(), by_org.values()))
        complete = all(listed)
        if complete:
            self.runs.reconciled(self.clock.now(), len(by_org))
        # K2 at scale: a pass must end within the reconcile interval; operators (and the scale
        # bench) read its duration here.
        took = time.monotonic() - started
        log.info(
            "reconcile pass: %d organizations, %d live runs in %.2f s",
            len(by_org),
            len(live),
            took,
            extra={
                "organizations": len(by_org),
                "live_runs": len(live),
                "pass_s": round(took, 3),
                "shard": f"{shard}/{shards}",
                "quiet_skipped": quiet,
            },
        )

    def _swept_now(self) -> Callable[[str], bool] | None:
        """Which quiet organizations this pass compares (`reconcile_idle_every`): a share by
        organization id that turns with the clock's reconcile slot, the same in every process,
        so each is compared once in that many intervals; None: all of them."""
        every = self.settings.reconcile_idle_every
        if every <= 1:
            return None
        slot = int(self.clock.now().timestamp() // self.settings.reconcile_interval_s)
        return lambda org_id: (org_share(org_id, every) + slot) % every == 0

    def reconcile_org(self, org_id: str, run_ids: list[str] | None = None) -> bool:
        """Drive the organization's live runs, then compare with RunPod; True when it listed."""
        if run_ids is None:
            run_ids = [r for o, r in self.runs.live_runs() if o == org_id]
        for run_id in run_ids:
            try:
                self.drive_run(run_id)
            except Exception as e:  # the actor retries; the next tick drives it again
                log.warning("reconcile: driving run %s failed: %s", run_id, e)
            try:
                self.refresh_urls(run_id)
            except Exception as e:  # the next tick tries again
                log.warning("reconcile: renewing the URLs of run %s failed: %s", run_id, e)
        for drive in self.org_drivers:
            try:
                drive(org_id)
            except Exception as e:  # the next tick drives it again
                log.warning("reconcile: driving %s of %s failed: %s", drive, org_id, e)
        self.reconciler.read_mailboxes(run_ids, only_due=True)
        listed = self.reconciler.compare_with_runpod(org_id, run_ids)
        self.reconciler.refresh_account_when_due(org_id)
        return listed

    def refresh_urls(self, run_id: str) -> None:
        """N1: a training run's manifest on custom S3 is issued again once its downloads' URLs
        are half way through their life, so a trainer that restarts in its Pod (and downloads
        again) reads working ones while each lives minutes. Its uploads' URLs still end with
        the Pod's runtime limit and grace, as at launch."""
        now = self.clock.now()
        half = timedelta(seconds=UrlLifetimes.of(0, self.settings).get_s / 2)
        last = self._issued.get(run_id)
        if last is not None and now - last < half:
            return
        run = self.log.load(Run, run_id)
        if run.state not in TRAINING or run.pod_status != POD_RUNNING or run.started_at is None:
            self._issued[run_id] = now  # looked at again in half the time, not every tick
            return
        if last is None and now - run.started_at < half:
            self._issued[run_id] = run.started_at  # issued at launch, by this process or another
            return
        if self.log.storage(run.org_id).kind == RUNPOD_VOLUME:
            self._issued[run_id] = now  # a volume's manifest has no URL
            return
        lifetimes = UrlLifetimes.of(int(run.config.max_runtime_minutes), self.settings)
        ends = run.started_at + timedelta(seconds=lifetimes.put_s)
        lifetimes = replace(lifetimes, put_s=max(60, int((ends - now).total_seconds())))
        issue_manifest(
            self.log,
            self.objects,
            self.storage,
            run,
            lifetimes,
            self.settings.hf_endpoint,
            revision=getattr(run, "base_model_revision", None),
        )
        self._issued[run_id] = now

    # ------------------------------------------------------------ a run's event
    def drive_run(self, run_id: str, max_steps: int = 8) -> None:
        """Do what the run's state calls for next until nothing is left (idempotent).

        One driver per run at a time (the lock); a save that lost a race with a user command
        just reloads and looks again. A provider error also compares the organization's Pods
        with RunPod (K2: after every error), outside the run's lock, then propagates so the
        actor retries.
        """
        with self._guard:
            if run_id in self._waiting:
                # K2 at scale: a drive of this run already waits for its turn in this process;
                # it loads the run once it has it, so it sees what this message is about. Each
                # event's message used to wait too, holding an actor thread apiece.
                return
            self._waiting.add(run_id)
        org_id, waiting = "", True
        try:
            with self.locks.hold(run_id):
                self._no_longer_waiting(run_id)
                waiting = False
                for _ in range(max_steps):
                    run = self.trainer.kept_runs.take(run_id)
                    org_id = run.org_id
                    try:
                        if not self._step(run):
                            # nothing more to do: unchanged, or saved (a step that raised
                            # never gets here), so what the log holds
                            self.trainer.kept_runs.give_back(run)
                            self._after_draft(run)
                            self._after_training(run)
                            return
                    except IntegrityError:
                        log.info("run %s changed while driving it; looking again", run_id)
        except errors.ProviderError:
            if org_id:
                self.reconciler.after_error(org_id)
            raise
        finally:
            if waiting:  # the lock was never had (an error taking it)
                self._no_longer_waiting(run_id)

    def _no_longer_waiting(self, run_id: str) -> None:
        with self._guard:
            self._waiting.discard(run_id)

    def _after_draft(self, run: Run) -> None:
        if run.state != DRAFT or self.after_draft is None:
            return
        try:
            self.after_draft(run)
        except Exception as e:  # a count is extra: never the drive's failure
            log.warning("counting the tokens of run %s's dataset failed: %s", run.id, e)

    def _after_training(self, run: Run) -> None:
        """K2 at scale: a run that trained and left training has its mailbox's log chunks read
        once more (passes read a Pod-log-fed run's mailbox only every few minutes), so a line
        only the mailbox holds reaches the run page however the run ended."""
        mailbox = self.reconciler.mailbox
        if mailbox is None or run.state in TRAINING or run.started_at is None:
            return
        try:
            mailbox.drain(run)
        except Exception as e:  # storage trouble: the lines stay in the mailbox; logged
            log.warning("reading the last mailbox lines of run %s failed: %s", run.id, e)

    def _step(self, run: Run) -> bool:  # noqa: PLR0911 - one return per state
        """One side effect; True when something was saved (so look again)."""
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
            self.log.save_all(run)
            return True
        if self._silent(run):
            return True
        if run.stop_pending:
            return self._stop(run)
        if run.pod_status in (POD_TERMINATING, POD_NEEDS_MANUAL):
            return self._terminate(run)
        return False

    # ------------------------------------------------------------ launch (R5)
    def _launch(self, run: Run) -> bool:
        org_id, run_id = run.org_id, str(run.id)
        key = self.connections.runpod_key(org_id)
        name = pod_name(run_id)
        at = self.clock.now()
        if run.state == CANCELLING:
            # A create may have happened before the crash or the cancel: find it, or stop here.
            found = self.compute.find_pod_by_name(key, name)
            if found is None:
                run.launch_failed("user_cancelled", "", SYSTEM, at)
                self.log.save_all(run)
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
            # R5: look the name up before any create. A redelivered message, or a worker that
            # died after RunPod made the Pod and before it was recorded, adopts that Pod.
            found = self.compute.find_pod_by_name(key, name)
            if found is not None and found.run_id in (None, run_id):
                return self._record_launched(run, found, name, at)
            revision = self._revision(run)
            try:
                pod = self.compute.launch_pod(key, self._pod_spec(run, name, at, revision))
            except (
                errors.CapacityUnavailable,
                errors.InsufficientBalance,
                errors.InsufficientPermissions,
            ) as e:
                run.launch_failed(
                    "capacity" if isinstance(e, errors.CapacityUnavailable) else e.problem,
                    e.detail,
                    SYSTEM,
                    at,
                )
                self.log.save_all(run)
                return True
            return self._record_launched(run, pod, name, at, revision)
        return self._record_launched(run, pod, name, at)

    def _revision(self, run: Run) -> str | None:
        """R19: the Hub commit the run's base model is pinned at (its manifest names it, so
        the trainer reads exactly that commit, and the lineage can say which)."""
        if self.hub_revision is None:
            return None
        return self.hub_revision(run.org_id, str(run.config.base_model))

    def _record_launched(
        self, run: Run, pod: PodInfo, name: str, at: datetime, revision: str | None = None
    ) -> bool:
        """Record the Pod id the moment RunPod returns it, before any wait."""
        org_id, run_id = run.org_id, str(run.id)
        run.record_pod_launched(
            pod.id,
            name,
            pod.cost_per_hour,
            pod.datacenter_id,
            pod.pod_host_id,
            pod.container_disk_gb or self.settings.container_disk_gb,
            pod.volume_gb,
            SYSTEM,
            at,
            *self._trainer_identity(),
            base_model_revision=revision,
        )
        conn = self.log.connection(org_id)
        conn.record_write_use("launch", conn.key_fingerprint or "", SYSTEM, at)
        self.log.save_all(run, conn)
        log.info("run %s launched pod %s", run_id, pod.id)
        return True

    def _trainer_identity(self) -> tuple[str | None, str | None]:
        """R19 lineage: the image a launch's Pod runs and the trainer's version, as `_pod_spec`
        chooses them: a baked image names its version in its tag; else the bundle's."""
        if self.settings.trainer_image:
            image = self.settings.trainer_image
            return image, image.rpartition(":")[2] if ":" in image else None
        if self.bundle is None:
            return self.settings.base_image, None
        return self.settings.base_image, self.bundle().version

    def _pod_spec(
        self, run: Run, name: str, at: datetime | None = None, revision: str | None = None
    ) -> PodSpec:
        """Write the run manifest, then the Pod's env: the run id, its token, the callback URL
        and where the manifest is, and on the public image where the trainer bundle is; nothing
        else (never a storage key pair)."""
        run_id = str(run.id)
        st = self.log.storage(run.org_id)
        cfg = run.config
        lifetimes = UrlLifetimes.of(int(cfg.max_runtime_minutes), self.settings)
        loc, creds = self.storage.location(run.org_id)
        limit = timedelta(minutes=int(cfg.max_runtime_minutes))
        # The limit the reconciler enforces runs from `at` (PodLaunched's time), and RunPod's
        # runtime clock from the Pod's creation just after: never later than either
        deadline = iso((at or self.clock.now()) + limit)
        env = {
            ENV_RUN_ID: run_id,
            ENV_RUN_TOKEN: self.trainer.token(run_id),
            ENV_CALLBACK_URL: self.settings.public_url.rstrip("/"),
            ENV_MANIFEST: issue_manifest(
                self.log,
                self.objects,
                self.storage,
                run,
                lifetimes,
                self.settings.hf_endpoint,
                deadline,
                revision,
            ),
        }
        image, start = self.settings.trainer_image, ""
        if not image:  # the public image, and a start command that brings the trainer
            if self.bundle is None:
                raise RuntimeError("no trainer image is set and no trainer bundle is wired")
            bundle = self.bundle()
            s3 = st.kind != RUNPOD_VOLUME
            # The bundle is our code, no secret of the user's: its GET lives as long as the Pod
            # may run, so a resumed Pod on custom S3 can fetch it again.
            env |= publish_bundle(
                self.objects, loc, creds, bundle, s3=s3, expires_s=lifetimes.put_s
            )
            image, start = self.settings.base_image, bundle.start_command
        return PodSpec(
            name=name,
            image=image,
            start_command=start,
            gpu_type_id=str(cfg.gpu_type_id),
            gpu_count=int(cfg.gpu_count),
            env=env,
            datacenter_id=run.datacenter_id,
            network_volume_id=st.volume_id if st.kind == RUNPOD_VOLUME else None,
            container_disk_gb=self.settings.container_disk_gb,
            volume_gb=0 if st.kind == RUNPOD_VOLUME else self.settings.local_volume_gb,
            stop_after=self.clock.now()
            + timedelta(
                minutes=int(cfg.max_runtime_minutes), seconds=self.settings.stop_after_grace_s
            ),
            registry_auth_id=self._registry_auth_id(run.org_id),
        )

    def _registry_auth_id(self, org_id: str) -> str | None:
        """RunPod's id of the registry credentials a baked image is pulled with, if attached."""
        if not self.settings.baked_image:
            return None
        return self.log.connection(org_id).registry_auth_id

    # ------------------------------------------------------------ no Pod bills unseen (R5, R8)
    def _silent(self, run: Run) -> bool:
        """A Pod that never reported within its boot deadline fails its boot (terminated); a
        trainer silent for the stall time after it trained is stopped and retained. True when
        that was saved. "No report on any channel" is judged after reading the run's mailbox,
        which the tick would read only after driving the run."""
        now, silence = self.clock.now(), Silence.of(self.settings)
        if not silence.possible(run, now):
            return False
        last = self.boot.last_report_at(run)
        overdue = run.boot_overdue(now, silence.boot_deadline, last, silence.stall_after)
        if not (overdue or run.stalled(now, last, silence.stall_after)):
            return False
        run_id = str(run.id)
        self.reconciler.read_mailboxes([run_id])
        if self.log.versions([run.id]).get(run.id) != run.version:
            return False  # the mailbox's reports moved the run on: their events drive it again
        last = self.boot.last_report_at(run)
        if run.boot_overdue(now, silence.boot_deadline, last, silence.stall_after):
            minutes = round(self.settings.boot_deadline_s / 60)
            why = f"no report on any channel within {minutes} minutes of the Pod's creation"
            key = self.connections.runpod_key(run.org_id)
            self.boot.fail_boot(run, key, why, now)
        elif run.stalled(now, last, silence.stall_after):
            run.record_stalled(last, SYSTEM, now)
            log.warning("run %s: no report on any channel since %s; stopping its Pod", run_id, last)
        else:
            return False
        self.log.save_all(run)
        return True

    # ------------------------------------------------------------ verification (R7, R9, R10)
    def _last_recovery(self, run: Run) -> dict[str, Any]:
        for event in reversed(list(self.log.repository.event_store.get(run.id))):
            if isinstance(event, RecoveryRequested):
                return {
                    "object_key": event.object_key,
                    "sha256": event.sha256,
                    "size_bytes": event.size_bytes,
                }
        return {"object_key": adapter_key(str(run.id))}

    def _verify(self, run: Run, key: str, sha256: str | None, size: int | None) -> bool:
        """R7: the adapter is a LoRA for this run's base model (domain/lora.py), streamed."""
        loc, creds = self.storage.location(run.org_id)
        verdict = self.heavy.check(
            run.org_id,
            str(run.id),
            self.objects,
            loc,
            creds,
            key,
            base_model=str(run.config.base_model),
            sha256=sha256,
            size_bytes=size,
        )
        if verdict is None:
            return False  # a heavy check is queued: its end drives the run again
        at = self.clock.now()
        if verdict.summary is not None:
            s = verdict.summary
            # N1: the run's adapter is the pinned copy of what was verified; a later write to
            # `key` (a presigned PUT a Pod still holds) never changes it unseen.
            pinned = pin_verified(self.objects, loc, creds, str(run.id), key, s.sha256)
            if pinned is None:
                log.warning(
                    "run %s: %s changed while it was verified; verifying again", run.id, key
                )
                return False
            run.record_adapter_verified(
                pinned, s.sha256, s.size_bytes, SYSTEM, at, training_record(s.metrics)
            )
            log.info("run %s adapter verified (%s, r=%d, %s)", run.id, pinned, s.r, s.dtype)
            try:
                revoke_manifest_urls(self.objects, loc, creds, str(run.id))
            except Exception as e:  # the URLs expire anyway; the pinned adapter is safe
                log.warning("run %s: its manifest's URLs were not withdrawn: %s", run.id, e)
        else:
            run.record_verification_failed(verdict.reason, verdict.detail, SYSTEM, at)
            log.info("run %s adapter refused: %s: %s", run.id, verdict.reason, verdict.detail)
        self.log.save_all(run)
        return True

    # ------------------------------------------------------------ stop and release (R8, K2, K3)
    def _stop(self, run: Run) -> bool:
        """R8: stop (not terminate) so the Pod's files are retained; re-read on errors."""
        key = self.connections.runpod_key(run.org_id)
        pod_id = run.pod_id or ""
        try:
            self.compute.stop_pod(key, pod_id)
        except errors.ProviderError as e:
            pod = self.compute.get_pod(key, pod_id)
            if pod is None or pod.status != POD_STOPPED:
                log.warning("stop of pod %s for run %s failed: %s", pod_id, run.id, e.detail)
                raise
        run.record_pod_stopped(run.stop_reason or "export_failed", SYSTEM, self.clock.now())
        self.log.save_all(run)
        log.info("run %s pod %s stopped and retained (%s)", run.id, pod_id, run.state_reason)
        return True

    def _terminate(self, run: Run) -> bool:
        """K2/K3: terminate, then confirm only when RunPod no longer lists the Pod."""
        org_id = run.org_id
        key = self.connections.runpod_key(org_id)
        pod_id = run.pod_id or ""
        now = self.clock.now()
        wait = timedelta(seconds=self.settings.termination_backoff(run.termination_attempts))
        if run.termination_attempts and now - run.modified_on < wait:
            return False
        still_listed, error = terminate_and_look(self.compute, key, pod_id)
        if still_listed:
            if run.pod_status == POD_NEEDS_MANUAL:
                return False
            run.record_termination_failed(
                error or "RunPod still lists the Pod",
                self.settings.max_termination_attempts,
                SYSTEM,
                now,
            )
            self.log.save_all(run)
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
        conn = self.log.connection(org_id)
        if adapter_ok:
            conn.record_write_use("release", conn.key_fingerprint or "", SYSTEM, now)
        self.log.save_all(run, conn)
        log.info("run %s pod %s terminated (confirmed: no longer listed)", run.id, pod_id)
        return True


def org_share(org_id: str, shares: int) -> int:
    """An organization's share of `shares`, the same in every process (crc32, not hash())."""
    return zlib.crc32(org_id.encode()) % shares
