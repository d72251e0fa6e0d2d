"""Training runs, as a member drives them (R1–R4, R9–R13); the worker's side is the reactor."""

from __future__ import annotations

import contextlib
import hashlib
import io
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import Any, BinaryIO
from uuid import UUID

from application.base_models import BaseModels
from application.conflicts import retry_on_conflict
from application.connections import ConnectionService
from application.hub import HubService
from application.log import TensorantLog
from application.manifests import (
    UrlLifetimes,
    architecture_defaults,
    as_api_hyperparameters,
    issue_manifest,
)
from application.pods import adapter_key
from application.ports import Clock, ComputeProvider, ObjectStore
from application.projects import ProjectService
from application.run_settings import RunSettings
from application.storage import StorageService
from domain.base_models import BaseModelAccessDenied, BaseModelGated, storage_folder
from domain.connection import Connection
from domain.errors import DomainError, NotFound, TensorantError
from domain.hyperparameters import checked_hyperparameters
from domain.launch import ConfirmationRequired, accepted_price, balance_refusal, quote
from domain.memory import DEFAULT_LORA_R, DEFAULT_SEQ_LEN
from domain.project import DatasetChanged, Project
from domain.run import SUCCEEDED, RecoveryNotPossible, Run
from domain.run_config import RunConfig, ensure_cuda13_hosts, ensure_offered_in_datacenter
from domain.storage import RUNPOD_VOLUME, Storage
from trainer.protocol import recovery_key

MAX_ADAPTER_UPLOAD = 512 * 1024 * 1024  # R10: what an upload may hold (more is refused)


@dataclass(frozen=True)
class RunService:
    log: TensorantLog
    compute: ComputeProvider
    objects: ObjectStore
    clock: Clock
    connections: ConnectionService
    storage: StorageService
    projects: ProjectService
    base_models: BaseModels
    hub: HubService
    settings: RunSettings = field(default_factory=RunSettings)

    # ------------------------------------------------------------ history (R6)
    def history(self, run_id: str, after: int, limit: int) -> list[Run.Event]:
        """The run's events after version `after`, oldest first: its own stream in the log
        (the caller has checked the run is the organization's)."""
        try:
            uid = UUID(run_id)
        except ValueError:
            raise NotFound(f"run {run_id} not found") from None
        events = self.log.events.get(uid, gt=after, limit=limit)
        return [e for e in events if isinstance(e, Run.Event)]

    # ------------------------------------------------------------ drafts (R1–R3)
    def _check(self, org_id: str, config: RunConfig) -> int | None:
        """What a draft must pass beyond its own rules: the project, dataset and baseline exist
        in the organization, and (R2) the GPU is offered where the volume is."""
        # read, not changed: one read of the log for the three (`peek`)
        project, st, conn = self.log.peek(
            (Project, str(config.project_id), org_id),
            (Storage, Storage.id_for(org_id), org_id),
            (Connection, Connection.id_for(org_id), org_id),
        )
        if not isinstance(project, Project):
            raise NotFound(f"project {config.project_id} not found")
        if str(config.dataset_version_id) not in project.datasets:
            raise NotFound(f"dataset version {config.dataset_version_id} not found in the project")
        project.ensure_enough_rows(str(config.dataset_version_id), str(config.kind))
        if config.kind == "full" and config.baseline_run_id:
            base = self.log.load(Run, str(config.baseline_run_id), org_id)
            if base.state != SUCCEEDED or base.config.project_id != config.project_id:
                raise DomainError(
                    "the baseline must be a succeeded run of the same project", rule="baseline"
                )
        hyper = config.hyperparameters or {}
        need_gb = self.base_models.need_gb(  # P2, at the chosen sequence length and rank (R16)
            org_id,
            str(config.base_model),
            int(hyper.get("max_seq_len", DEFAULT_SEQ_LEN)),
            int(hyper.get("lora_rank", DEFAULT_LORA_R)),
        )
        config.validated(need_gb)  # the domain rules, before RunPod is asked
        # C7: a gated model needs a token the Hub lets read it (nothing is downloaded)
        self.hub.ensure_can_read(org_id, str(config.base_model))
        if not isinstance(st, Storage):
            raise NotFound(f"storage {Storage.id_for(org_id)} not found")
        if st.kind != RUNPOD_VOLUME:
            return need_gb
        if not isinstance(conn, Connection):
            raise NotFound(f"connection {Connection.id_for(org_id)} not found")
        if conn.status != "connected":
            return need_gb
        # a draft rents nothing: offers a few seconds old will do; a launch asks RunPod anew.
        # The copy is found by the connection at its version (a rotated key is a new version)
        # without reading the key from the vault; only a missing copy needs the key.
        account, count = f"{conn.id}@{conn.version}", int(config.gpu_count)
        offers = self.compute.cached_gpus(account, count)
        if offers is None:
            key = self.connections.runpod_key(org_id)
            offers = self.compute.list_gpus(key, count, allow_cached=True, account=account)
        offer = next((o for o in offers if o.id == config.gpu_type_id), None)
        ensure_cuda13_hosts(
            str(config.gpu_type_id), offer.no_cuda13 if offer else (), st.datacenter_id or ""
        )
        ensure_offered_in_datacenter(
            str(config.gpu_type_id), offer.datacenters if offer else [], st.datacenter_id or ""
        )
        return need_gb

    def default_hyperparameters(self, org_id: str, base_model: str) -> dict[str, Any]:
        """R16: the hyperparameters a run of `base_model` takes unless chosen (API names), by
        its architecture and size (a storage model's read from its config.json)."""
        loc, creds = None, None
        if storage_folder(base_model) is not None:  # a catalogue model reads nothing
            with contextlib.suppress(TensorantError):  # none yet: the draft's check says so
                loc, creds = self.storage.location(org_id)
        return as_api_hyperparameters(architecture_defaults(base_model, self.objects, loc, creds))

    def with_defaults(self, org_id: str, config: RunConfig) -> RunConfig:
        """R16: `config` with every hyperparameter, those not chosen (`config.hyperparameters`
        holds the chosen ones) defaulted from the base model's architecture and named in
        `defaults`. The chosen ones are checked against their bounds first."""
        chosen = checked_hyperparameters(config.hyperparameters or {})
        values = {**self.default_hyperparameters(org_id, str(config.base_model)), **chosen}
        defaults = [name for name in values if name not in chosen]
        return replace(config, hyperparameters=values, defaults=defaults)

    def draft(self, org_id: str, actor: str, config: RunConfig) -> tuple[str, int]:
        """R3: a draft rents nothing; returns (run id, position)."""
        config = self.with_defaults(org_id, config)
        need_gb = self._check(org_id, config)
        run = Run.draft(org_id, config, actor, self.clock.now(), need_gb)
        return str(run.id), self.log.save_all(run)

    @retry_on_conflict
    def update_draft(self, org_id: str, run_id: str, actor: str, config: RunConfig) -> int:
        run = self.log.run(org_id, run_id)
        run.ensure_editable()
        config = self.with_defaults(org_id, config)
        need_gb = self._check(org_id, config)
        run.update_draft(config, actor, self.clock.now(), need_gb)
        return self.log.save_all(run)

    @retry_on_conflict
    def discard_draft(self, org_id: str, run_id: str, actor: str) -> int:
        run = self.log.run(org_id, run_id)
        run.discard(actor, self.clock.now())
        return self.log.save_all(run)

    # ------------------------------------------------------------ launch (R4)
    @retry_on_conflict
    def launch(
        self,
        org_id: str,
        run_id: str,
        actor: str,
        confirm: bool,
        accepted_price_per_hour: Decimal | str | None,
    ) -> int:
        """R4: the price the user accepted meets RunPod's catalog and balance now; a refusal
        is recorded on the run (LaunchRejected) before it is raised."""
        run = self.log.run(org_id, run_id)
        accepted = accepted_price(confirm, accepted_price_per_hour)
        run.ensure_launchable()
        self.log.connection(org_id).ensure_connected()
        st = self.log.storage(org_id)
        st.ensure_connected()
        key = self.connections.runpod_key(org_id)
        cfg = run.config
        try:  # P1: the bytes that were checked are the bytes that will train, or nothing rents
            self.projects.ensure_dataset_unchanged(
                org_id, str(cfg.project_id), str(cfg.dataset_version_id)
            )
        except DatasetChanged as changed:
            run.reject_launch(changed.problem, changed.detail, actor, self.clock.now())
            changed.position = self.log.save_all(run)
            raise
        try:  # C7: the token may have been removed, or its access revoked, since the draft
            self.hub.ensure_can_read(org_id, str(cfg.base_model))
        except (BaseModelGated, BaseModelAccessDenied) as refused:
            run.reject_launch(refused.problem, refused.detail, actor, self.clock.now())
            refused.position = self.log.save_all(run)
            raise
        offers = self.compute.list_gpus(key, int(cfg.gpu_count))
        offer = next((o for o in offers if o.id == cfg.gpu_type_id), None)
        datacenter = st.datacenter_id if st.kind == RUNPOD_VOLUME else None
        price, refusal = quote(
            cfg,
            offer.price_per_hour if offer else None,
            offer.datacenters if offer else [],
            datacenter,
            accepted,
            offer.no_cuda13 if offer else (),
        )
        if refusal is None:
            refusal = balance_refusal(self.compute.check_account(key).balance, price)
        at = self.clock.now()
        if refusal is not None:
            run.reject_launch(refusal.problem, refusal.detail, actor, at)
            refusal.position = self.log.save_all(run)
            raise refusal
        run.confirm_launch(accepted, price, datacenter, actor, at)
        return self.log.save_all(run)

    # ------------------------------------------------------------ user actions (R9–R13)
    @retry_on_conflict
    def cancel(self, org_id: str, run_id: str, actor: str) -> int:
        run = self.log.run(org_id, run_id)
        run.cancel(actor, self.clock.now())
        return self.log.save_all(run)

    @retry_on_conflict
    def resume_pod(self, org_id: str, run_id: str, actor: str, confirm_billing: bool) -> int:
        """R11: synchronous so a capacity refusal reaches the user; the Pod then stays stopped."""
        run = self.log.run(org_id, run_id)
        if not confirm_billing:
            raise ConfirmationRequired(
                "resuming the Pod resumes GPU billing: confirm with confirm_billing: true"
            )
        run.ensure_resumable()
        key = self.connections.runpod_key(org_id)
        # N1: the resumed trainer reads its manifest again; its presigned URLs are issued
        # afresh (those of the launch have expired, or were withdrawn at verification).
        lifetimes = UrlLifetimes.of(int(run.config.max_runtime_minutes), self.settings)
        issue_manifest(
            self.log, self.objects, self.storage, run, lifetimes, self.settings.hf_endpoint
        )
        pod = self.compute.resume_pod(key, run.pod_id or "", int(run.config.gpu_count))
        run.record_pod_resumed(pod.cost_per_hour, pod.pod_host_id, actor, self.clock.now())
        return self.log.save_all(run)

    @retry_on_conflict
    def release_pod(
        self, org_id: str, run_id: str, actor: str, confirm_delete_unverified: bool
    ) -> int:
        run = self.log.run(org_id, run_id)
        run.request_release(confirm_delete_unverified, actor, self.clock.now())
        return self.log.save_all(run)

    @retry_on_conflict
    def recover_from_volume(self, org_id: str, run_id: str, actor: str) -> int:
        """R9: verify the adapter the trainer saved on the network volume."""
        run = self.log.run(org_id, run_id)
        if self.log.storage(org_id).kind != RUNPOD_VOLUME:
            raise RecoveryNotPossible(
                "this organization uses custom S3: retrieve /workspace/data/adapter.zip from the "
                "Pod and upload it with Verify and recover"
            )
        key = (run.exported or {}).get("object_key") or adapter_key(run_id)
        run.request_recovery("volume", key, None, None, actor, self.clock.now())
        return self.log.save_all(run)

    @retry_on_conflict
    def recover_from_upload(
        self, org_id: str, run_id: str, actor: str, data: bytes | BinaryIO
    ) -> int:
        """R10: store the uploaded adapter.zip, then verify it like an exported one. A stream
        (the API's spooled upload) is hashed and stored in chunks, never held whole."""
        run = self.log.run(org_id, run_id)
        source: BinaryIO = io.BytesIO(data) if isinstance(data, bytes) else data
        source.seek(0)
        digest, size = hashlib.sha256(), 0
        while chunk := source.read(1 << 20):
            size += len(chunk)
            if size > MAX_ADAPTER_UPLOAD:
                raise DomainError("adapter.zip is larger than 512 MB", rule="upload")
            digest.update(chunk)
        run.ensure_recoverable()
        if not size:
            raise DomainError("the uploaded adapter.zip is empty", rule="upload")
        key = recovery_key(run_id)
        loc, creds = self.storage.location(org_id)
        source.seek(0)
        self.objects.upload(loc, creds, key, source)
        run.request_recovery("upload", key, digest.hexdigest(), size, actor, self.clock.now())
        return self.log.save_all(run)
