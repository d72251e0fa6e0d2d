"""The service layer, composed: one log and one plain class per area.

Each area class takes ids and values, loads aggregates from the log, calls the domain and saves;
they share the log (one ordered history) and call each other only downwards (runs use the
connection's key and the storage's location; the reactor asks the reconciler to compare after
an error). `Services` is what the API, the CLI and the worker are given.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from eventsourcing.persistence import ApplicationRecorder

from application.base_models import BaseModels
from application.billing import BillingReconciler
from application.bundle import BundleSource
from application.connections import ConnectionService
from application.deployments import TICK_AFTER, DeploymentService, LiveOnEndpoint, Unfinished
from application.heavy_checks import HeavyChecks
from application.hub import HubService
from application.log import LogReads, TensorantLog
from application.mailbox import MailboxReader
from application.memory import (
    LocalLeases,
    LocalLocks,
    MemoryReportStore,
    NoHub,
    NoRuns,
    NothingOwned,
)
from application.organizations import OrganizationService
from application.pod_logs import PodLogFollowers
from application.ports import (
    Clock,
    ComputeProvider,
    Leases,
    ModelHub,
    ObjectStore,
    OwnedResources,
    PodLogSource,
    ReportStore,
    RunIndex,
    RunLocks,
    SecretVault,
    ServingMeter,
    ServingProvider,
)
from application.projects import ProjectService
from application.reactor import Reactor
from application.reconciler import Reconciler
from application.report_reads import ReportReads
from application.run_settings import RunSettings
from application.runs import RunService
from application.serving_endpoints import ENDPOINTS_EVERY_S, EndpointOwned, EndpointReconciler
from application.storage import StorageService
from application.token_counts import TokenCounter, TokenCounts
from application.trainer_callbacks import TrainerCallbacks
from application.watchdog import BootWatch
from application.webhooks import UrlCheck, WebhookService


@dataclass(frozen=True)
class Services:
    log: TensorantLog
    clock: Clock
    organizations: OrganizationService
    connections: ConnectionService
    hub: HubService
    storage: StorageService
    projects: ProjectService
    base_models: BaseModels
    runs: RunService
    trainer: TrainerCallbacks
    report_reads: ReportReads
    reactor: Reactor
    reconciler: Reconciler
    billing: BillingReconciler
    followers: PodLogFollowers | None = None  # RunPod's Pod logs (REST v2)
    webhooks: WebhookService | None = None  # R20: endpoints (deliveries are the read side's)
    deployments: DeploymentService | None = None  # V1, V2: managed serving
    token_counts: TokenCounts | None = None  # P1: datasets' tokens per base model

    def close(self) -> None:
        if self.token_counts is not None:
            self.token_counts.close()
        self.log.close()


def build_services(
    env: Mapping[str, str] | None = None,
    *,
    compute: ComputeProvider,
    objects: ObjectStore,
    vault: SecretVault,
    clock: Clock,
    settings: RunSettings | None = None,
    runs: RunIndex | None = None,
    locks: RunLocks | None = None,
    owned: OwnedResources | None = None,
    reports: ReportStore | None = None,
    pod_logs: PodLogSource | None = None,
    leases: Leases | None = None,
    max_followers: int = 32,
    heavy: HeavyChecks | None = None,
    reads: Callable[[ApplicationRecorder], LogReads | None] | None = None,
    check_webhook_url: UrlCheck | None = None,
    hub: ModelHub | None = None,
    bundle: BundleSource | None = None,
    serving: ServingProvider | None = None,
    live_on_endpoint: LiveOnEndpoint | None = None,
    cold_start_bound_s: float = 120.0,
    serving_resume_after_s: float = TICK_AFTER.total_seconds(),
    endpoints_every_s: float = ENDPOINTS_EVERY_S,
    unfinished_deployments: Unfinished | None = None,
    serving_meter: ServingMeter | None = None,
    chat_rate_limit: int = 0,
    chat_rate_window_s: float = 60.0,
    endpoint_owned: EndpointOwned | None = None,
    token_counter: TokenCounter | None = None,
) -> Services:
    """Open the log (eventsourcing's `env`) and wire every area to it and to the ports; what
    the read side provides (`runs`, `owned`) knows nothing when not given."""
    log = TensorantLog(env, reads=reads)
    settings = settings or RunSettings()
    runs = runs or NoRuns()
    locks = locks or LocalLocks()
    connections = ConnectionService(log, compute, vault, clock, pods=runs)
    storage = StorageService(log, compute, objects, vault, clock, connections)
    hub_service = HubService(log, hub or NoHub(), vault, clock)
    trainer = TrainerCallbacks(log, clock, settings, reports or MemoryReportStore())
    projects = ProjectService(log, clock, objects, storage, settings.max_dataset_bytes)
    base_models = BaseModels(objects, storage)
    mailbox = MailboxReader(log, objects, storage, trainer)
    report_reads = ReportReads(trainer.reports, settings, trainer.started_by)
    # R5: a failed boot's reason from the Pod's logs
    boot = BootWatch(trainer, report_reads, pod_logs)
    reconciler = Reconciler(
        log, compute, clock, settings, locks, runs, connections, mailbox, boot=boot
    )
    followers = None
    if pod_logs is not None:
        followers = PodLogFollowers(
            log,
            pod_logs,
            connections,
            trainer,
            runs,
            leases or LocalLeases(),
            max_followers=max_followers,
        )
    token_counts = None
    if token_counter is not None:  # P1: drafts' datasets counted in tokens
        token_counts = TokenCounts(log, objects, storage, clock, token_counter)
    deployments = None
    org_drivers: list[Callable[[str], None]] = []
    if serving is not None:
        deployments = DeploymentService(
            log,
            clock,
            serving,
            objects,
            connections.runpod_key,
            storage.location,
            live_on_endpoint or (lambda _org, _name: []),
            cold_start_bound_s,
            unfinished_deployments,
            hub_service.ensure_can_read,
            serving_meter,
            chat_rate_limit,
            chat_rate_window_s,
            tick_after=timedelta(seconds=serving_resume_after_s),
        )
        org_drivers.append(deployments.drive_unfinished)
        if endpoint_owned is not None:  # V3: endpoints' bills and orphans, beside the Pods'
            endpoints = EndpointReconciler(
                log, serving, clock, connections.runpod_key, endpoint_owned, endpoints_every_s
            )
            org_drivers.append(endpoints.reconcile_when_due)
    services = Services(
        log=log,
        clock=clock,
        organizations=OrganizationService(log, clock),
        connections=connections,
        hub=hub_service,
        storage=storage,
        projects=projects,
        runs=RunService(
            log,
            compute,
            objects,
            clock,
            connections,
            storage,
            projects,
            base_models,
            hub_service,
            settings,
        ),
        base_models=base_models,
        trainer=trainer,
        report_reads=report_reads,
        reactor=Reactor(
            log,
            compute,
            objects,
            clock,
            settings,
            locks,
            runs,
            connections,
            storage,
            trainer,
            reconciler,
            heavy or HeavyChecks(),
            boot,
            bundle,
            org_drivers,
            token_counts.after_draft if token_counts is not None else None,
            hub_revision=hub_service.revision if hub is not None else None,
        ),
        reconciler=reconciler,
        billing=BillingReconciler(
            log,
            compute,
            clock,
            connections,
            runs,
            owned=owned or NothingOwned(),
            serverless=serving.billing if serving is not None else None,
        ),
        followers=followers,
        webhooks=WebhookService(log, vault, clock, check_webhook_url),
        deployments=deployments,
        token_counts=token_counts,
    )
    # A heavy adapter check that ended drives its run on the check's own thread.
    services.reactor.heavy.notify = services.reactor.drive_run
    return services
