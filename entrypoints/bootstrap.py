"""The one composition root: settings -> event store, view store, vault, adapters, services,
projectors, and (where the process runs them) the broker, the worker, the relay and the tickers.

Nothing connects at import time; `build()` opens everything and `Container.close()` releases it.
Tests pass fakes for the ports (compute, objects, vault, clock).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from adapters import vault as vaults
from adapters.broker import EmbeddedWorker, is_embedded, make_broker, register_actors
from adapters.event_versions import log_reads
from adapters.logstore import LogStore, PostgresLogStore, SQLiteLogStore
from adapters.runpod.serverless import RunPodServing
from adapters.serving_meter import PostgresServingMeter, SQLiteServingMeter
from adapters.token_count import ChildTokenCounter
from adapters.trainer_bundle import build_bundle
from adapters.webhook_http import HttpTransport
from application.log import TensorantLog
from application.ports import (
    Clock,
    ComputeProvider,
    Leases,
    ModelHub,
    ObjectStore,
    RunLocks,
    SecretVault,
)
from application.run_settings import RunSettings
from application.services import Services, build_services
from domain.times import iso
from entrypoints.settings import Settings
from entrypoints.tickers import Ticker
from projections.relay import Relay
from projections.store.base import ViewStore
from projections.store.engine import ProjectionSet, Projector
from projections.store.postgres import PostgresViewStore
from projections.store.sqlite import SQLiteViewStore
from projections.store.urls import open_view_store
from projections.views.deployments import endpoint_owned, live_on_endpoint, unfinished
from projections.views.indexes import ViewOwnedResources, ViewRunIndex
from projections.views.registry import all_projections
from projections.webhooks import Deliverer, DeliveryPolicy, WebhookDispatch

log = logging.getLogger("tensorant.bootstrap")


class SystemClock:
    """The host's clock, aware UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


def eventsourcing_env(settings: Settings) -> dict[str, str]:
    """The eventsourcing library's settings for the configured event store."""
    if not settings.is_postgres:
        return {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": str(settings.events_path),
        }
    pg = settings.postgres
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": pg.dbname,
        "POSTGRES_HOST": pg.host,
        "POSTGRES_PORT": str(pg.port),
        "POSTGRES_USER": pg.user,
        "POSTGRES_PASSWORD": pg.password,
        "POSTGRES_POOL_SIZE": str(settings.db_pool_size),
        "POSTGRES_MAX_OVERFLOW": str(settings.db_pool_size),
    }
    if pg.schema != "public":
        env["POSTGRES_SCHEMA"] = pg.schema
    return env


def master_key(settings: Settings) -> bytes:
    """C6: the master key, from the environment or DATA_DIR/master.key (created once, 0600)."""
    if settings.master_key is not None:
        return vaults.master_key_from_env(settings.master_key.get_secret_value())
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    return vaults.load_or_create_master_key(settings.master_key_path)


def trainer_secret(master: bytes) -> bytes:
    """The key of the per-run trainer tokens: derived from the master key, stable on restart.

    Every process of a deployment shares the master key, so a token minted by the worker that
    launched a Pod is accepted by whichever API process the trainer calls back.
    """
    return hmac.new(master, b"tensorant trainer tokens v1", hashlib.sha256).digest()


def open_vault(settings: Settings, master: bytes) -> SecretVault:
    """The envelope-encrypting SQL vault, beside the event store."""
    if settings.is_postgres:
        return vaults.SqlSecretVault.postgres(settings.postgres.with_search_path(), master)
    return vaults.SqlSecretVault.sqlite(settings.data_dir / "vault.db", master)


def open_views(settings: Settings) -> ViewStore:
    """Views live in a separate SQLite file, or in the PostgreSQL database (same schema)."""
    if settings.view_database_url:
        return open_view_store(settings.view_database_url)
    if settings.is_postgres:
        pg = settings.postgres
        return PostgresViewStore(
            pg.conninfo,
            schema=pg.schema,
            table_prefix=pg.table_prefix,
            max_size=settings.db_pool_size,
        )
    return SQLiteViewStore(str(settings.views_path.resolve()))


def open_for_rebuild() -> tuple[TensorantLog, ViewStore]:
    """The log and the view store of the configured deployment, for a process that rebuilds
    a share of the views (`tensorant projections rebuild --processes N`)."""
    settings = Settings()
    return TensorantLog(eventsourcing_env(settings)), open_views(settings)


def open_logs(settings: Settings) -> LogStore:
    """Trainer log lines: a SQLite file of their own, or a table beside the event store."""
    if settings.is_postgres:
        pg = settings.postgres
        return PostgresLogStore(
            pg.conninfo,
            schema=pg.schema,
            max_lines=settings.log_max_lines,
            log_in_database=True,  # the event store's (`eventsourcing_env`: the same database)
        )
    path = (settings.data_dir / "logs.db").resolve()
    return SQLiteLogStore(path, max_lines=settings.log_max_lines, events_path=settings.events_path)


def open_meter(settings: Settings) -> SQLiteServingMeter | PostgresServingMeter:
    """Managed serving's rate-limit buckets and usage counts (V2): a SQLite file of their own,
    or tables beside the event store, where every API process shares them."""
    if settings.is_postgres:
        pg = settings.postgres
        return PostgresServingMeter(pg.conninfo, schema=pg.schema)
    return SQLiteServingMeter((settings.data_dir / "serving.db").resolve())


def default_compute(settings: Settings) -> ComputeProvider:
    """TENSORANT_RUNPOD_API selects GraphQL (the SDK's API) or REST v2; billing is REST v2."""
    from adapters.runpod import make_compute

    return make_compute(settings.runpod_api, settings.runpod_api_base_url)


def default_hub(settings: Settings) -> ModelHub:
    """The Hugging Face Hub at TENSORANT_HF_ENDPOINT, through huggingface_hub (C7)."""
    from adapters.huggingface import HubClient

    return HubClient(settings.hf_endpoint)


def default_serving(settings: Settings) -> RunPodServing:
    """RunPod Serverless over REST v2 (managed serving, V1), at the same base URL as compute."""
    return RunPodServing(settings.runpod_api_base_url)


def default_objects(settings: Settings) -> ObjectStore:
    from adapters.objectstore import S3ObjectStore

    built: ObjectStore = S3ObjectStore(
        settings.runpod_s3_endpoint_template, settings.s3_allow_endpoints
    )
    return built


@dataclass
class Container:
    """Everything a process needs, built once; the API keeps it in `app.state`."""

    settings: Settings
    services: Services
    views: ViewStore
    projections: ProjectionSet
    clock: Clock
    logs: LogStore
    closers: list[Any] = field(default_factory=list)
    webhooks: Deliverer | None = None  # R20: sent where the relay runs (`start_reactions`)

    @property
    def balance_warning_days(self) -> float:
        return self.settings.balance_warning_days

    def start(self, *, projectors: bool, reactions: bool) -> None:
        """What an API process runs beside the API: the projector threads, and with the
        embedded broker (no TENSORANT_BROKER_URL) the worker, the relay and the tickers."""
        if projectors:
            self.projections.start(self.settings.projection_poll_interval)
        if reactions and is_embedded(self.settings.broker_url):
            self.start_reactions(worker=True, relay=True)

    def start_reactions(self, *, worker: bool, relay: bool) -> None:
        """Broker, worker, outbox relay and the tickers beside it; closers run in reverse."""
        actors = register_actors(
            make_broker(self.settings.broker_url),
            self.services.reactor.drive_run,
            reconcile=self.services.reactor.reconcile_tick,
            queue_name=self.settings.queue_name,
        )
        self.closers.append(actors.broker.close)
        if worker:
            w = EmbeddedWorker(actors)
            w.start()
            self.closers.append(w.stop)
            self.start_followers()
        if relay:
            r = Relay(
                self.services.log,
                self.views,
                actors,
                poll_interval=self.settings.projection_poll_interval,
            )
            r.start()
            self.closers.append(r.stop)
            if self.webhooks is not None:
                dispatch = WebhookDispatch(
                    self.services.log,
                    self.views,
                    self.webhooks,
                    poll_interval=self.settings.projection_poll_interval,
                    balance_warning_days=self.settings.balance_warning_days,
                )
                self.closers.append(dispatch.start().stop)
            for ticker in (
                Ticker(
                    "tick:reconcile",
                    self.settings.reconcile_interval,
                    lambda slot: actors.send_reconcile(slot, self.settings.reconcile_shards),
                ),
                Ticker(
                    "tick:billing",
                    self.settings.billing_reconcile_interval,
                    lambda _slot: self.services.billing.reconcile_all(),
                    at_start=False,
                ),
            ):
                self.closers.append(ticker.start().stop)

    def start_followers(self) -> None:
        """This worker follows Pod logs (REST v2) of training runs nobody follows."""
        followers = self.services.followers
        if followers is None:
            return
        scan = min(self.settings.reconcile_interval, 5.0)
        t = threading.Thread(
            target=followers.run_forever, args=(scan,), daemon=True, name="pod-logs"
        )
        t.start()
        self.closers.append(followers.stop)

    def wait_for(self, position: int) -> bool:
        """Read-your-writes: wait (bounded) until every view has applied `position`."""
        if position <= 0:
            return True
        ok = self.projections.catch_up_to(position, self.settings.read_your_writes_timeout)
        if not ok:
            log.warning("views did not reach notification %d in time", position)
        return ok

    def catch_up(self) -> None:
        """Apply everything recorded so far (CLI commands before they exit)."""
        self.projections.run_once()

    def stop_projectors(self) -> None:
        self.projections.stop()

    def close(self) -> None:
        self.projections.stop()
        for closer in reversed(self.closers):
            try:
                closer()
            except Exception:  # closing must not hide the first error
                log.exception("closing %r failed", closer)
        self.views.close()
        self.services.close()


def build(
    settings: Settings | None = None,
    *,
    compute: ComputeProvider | None = None,
    objects: ObjectStore | None = None,
    vault: SecretVault | None = None,
    clock: Clock | None = None,
    hub: ModelHub | None = None,
) -> Container:
    """Build the process's object graph; ports not given are the real adapters."""
    settings = settings or Settings()
    if not settings.is_postgres:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    master = master_key(settings)
    vault = vault or open_vault(settings, master)
    views = open_views(settings)
    closers: list[Any] = []
    run_locks: RunLocks | None = None
    leases: Leases | None = None
    if settings.is_postgres:
        from adapters.run_locks import PostgresLeases, PostgresRunLocks

        # One connection for every run lock of the process, as for its leases: a database's
        # connections are shared by every process of the deployment (docs/scaling.md).
        locks = PostgresRunLocks(settings.postgres.conninfo)
        closers.append(locks.close)
        run_locks = locks
        pg_leases = PostgresLeases(settings.postgres.conninfo)
        closers.append(pg_leases.close)
        leases = pg_leases
    compute = compute or default_compute(settings)
    # Pod logs are a REST v2 feature; followed when that is the configured API.
    follow = getattr(compute, "pod_logs", None) if settings.runpod_api == "rest" else None
    clock = clock or SystemClock()
    logs = open_logs(settings)
    closers.append(logs.close)
    meter = open_meter(settings)
    closers.append(meter.close)
    webhook_http = HttpTransport(settings.webhook_allow_endpoints)
    closers.append(webhook_http.close)
    serving = default_serving(settings)
    closers.append(serving.close)
    services = build_services(
        eventsourcing_env(settings),
        compute=compute,
        objects=objects or default_objects(settings),
        vault=vault,
        clock=clock,
        settings=RunSettings(
            trainer_image=settings.trainer_image,
            base_image=settings.trainer_base_image,
            public_url=settings.callback_url,
            hf_endpoint=settings.hf_endpoint,
            trainer_secret=trainer_secret(master),
            max_termination_attempts=settings.max_termination_attempts,
            termination_backoff_s=settings.termination_backoff_seconds,
            account_refresh_interval_s=settings.account_refresh_interval,
            max_dataset_bytes=settings.max_dataset_bytes,
            stall_after_s=settings.stall_after,
            boot_deadline_s=settings.boot_deadline_minutes * 60,
            reconcile_interval_s=settings.reconcile_interval,
            reconcile_threads=settings.reconcile_threads,
            reconcile_idle_every=settings.reconcile_idle_every,
            stop_after_grace_s=settings.stop_after_grace_minutes * 60,
            baked_image=settings.trainer_image != Settings.model_fields["trainer_image"].default,
        ),
        runs=ViewRunIndex(views),
        locks=run_locks,
        owned=ViewOwnedResources(views),
        reports=logs,
        pod_logs=compute if callable(follow) else None,  # type: ignore[arg-type]
        leases=leases,
        max_followers=settings.pod_log_followers,
        reads=log_reads,
        check_webhook_url=webhook_http.check,
        hub=hub or default_hub(settings),
        bundle=build_bundle,
        serving=serving,
        live_on_endpoint=lambda org_id, name: live_on_endpoint(views, org_id, name),
        cold_start_bound_s=settings.serving_cold_start_s,
        serving_meter=meter,
        chat_rate_limit=settings.serving_rate_limit,
        chat_rate_window_s=settings.serving_rate_window_s,
        serving_resume_after_s=settings.serving_resume_after_s,
        endpoints_every_s=settings.serving_endpoints_interval,
        unfinished_deployments=lambda org_id, before: unfinished(views, org_id, iso(before)),
        endpoint_owned=lambda org_id, eid, name: endpoint_owned(views, org_id, eid, name),
        token_counter=ChildTokenCounter(settings.hf_endpoint) if settings.count_tokens else None,
    )
    closers.append(services.reactor.heavy.close)
    projections = ProjectionSet([Projector(services.log, views, p) for p in all_projections()])
    close_vault = getattr(vault, "close", None)
    if callable(close_vault):
        closers.append(close_vault)
    return Container(
        settings=settings,
        services=services,
        views=views,
        projections=projections,
        clock=clock,
        logs=logs,
        closers=closers,
        webhooks=Deliverer(
            views,
            vault,
            webhook_http,
            DeliveryPolicy(
                backoff_base_s=settings.webhook_backoff_base_s,
                backoff_max_s=settings.webhook_backoff_max_s,
                max_attempts=settings.webhook_max_attempts,
                timeout_s=settings.webhook_timeout_s,
            ),
        ),
    )


def sandbox_settings(settings: Settings, sandbox: Any) -> Settings:
    """Point the adapters at a running sandbox; the SSRF guard allow-lists its S3 front only
    (`<base>/s3/`), never its admin routes (`/_sandbox/*`: clock, faults, balance)."""
    creds = sandbox.credentials()
    template: str = creds["s3_endpoint_template"]  # <base>/s3/{dc}
    s3_front = template.split("{dc}", 1)[0]
    return settings.model_copy(
        update={
            "runpod_api_base_url": sandbox.base_url,
            "hf_endpoint": creds["hub_url"],
            "runpod_s3_endpoint_template": template,
            "s3_allow_endpoints": [*settings.s3_allow_endpoints, s3_front],
        }
    )


def build_for_sandbox(settings: Settings, sandbox: Any, **ports: Any) -> Container:
    """`serve --sandbox`, the demo and the e2e tests: real adapters, the sandbox's clock."""
    return build(sandbox_settings(settings, sandbox), clock=sandbox.clock, **ports)
