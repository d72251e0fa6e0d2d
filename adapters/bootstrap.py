"""The one composition root: settings -> event store, view store, vault, adapters, app, projectors.

Nothing connects at import time; `build()` opens everything and `Container.close()` releases it.
Tests pass fakes for the ports (compute, objects, vault, clock).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit, urlunsplit

from adapters.logstore import LogStore, open_log_store
from adapters.settings import Settings
from application.ports import Clock, ComputeProvider, ObjectStore, SecretVault
from application.runs import RunSettings
from application.service import TensorantApp
from projections.engine import ProjectionSet, Projector
from projections.runs_view import ViewRunIndex
from projections.store import ViewStore, open_view_store
from projections.views import all_projections

log = logging.getLogger("tensorant.bootstrap")


class SystemClock:
    """The host's clock, aware UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


def split_postgres_url(url: str) -> tuple[str, str]:
    """(libpq URL without our `schema` parameter, schema)."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    schema = next((v for k, v in query if k == "schema"), "") or "public"
    rest = [(k, v) for k, v in query if k != "schema"]
    return urlunsplit(parts._replace(query=urlencode(rest))), schema


def eventsourcing_env(settings: Settings) -> dict[str, str]:
    """The eventsourcing library's settings for the configured event store."""
    if not settings.is_postgres:
        return {
            "PERSISTENCE_MODULE": "eventsourcing.sqlite",
            "SQLITE_DBNAME": str(settings.events_path),
        }
    url, schema = split_postgres_url(str(settings.database_url))
    parts = urlsplit(url)
    env = {
        "PERSISTENCE_MODULE": "eventsourcing.postgres",
        "POSTGRES_DBNAME": unquote(parts.path.lstrip("/")) or "postgres",
        "POSTGRES_HOST": parts.hostname or "127.0.0.1",
        "POSTGRES_PORT": str(parts.port or 5432),
        "POSTGRES_USER": unquote(parts.username or "postgres"),
        "POSTGRES_PASSWORD": unquote(parts.password or ""),
        "POSTGRES_POOL_SIZE": "8",
        "POSTGRES_MAX_OVERFLOW": "8",
    }
    if schema != "public":
        env["POSTGRES_SCHEMA"] = schema
    return env


def view_store_url(settings: Settings) -> str:
    """Views live in a separate SQLite file, or in the PostgreSQL database (same schema)."""
    if settings.view_database_url:
        return settings.view_database_url
    if settings.is_postgres:
        return str(settings.database_url)
    return f"sqlite:///{settings.views_path.resolve()}"


def default_vault(settings: Settings) -> SecretVault:
    """The envelope-encrypting SQL vault; its master key comes from the env or DATA_DIR."""
    from adapters import vault

    if settings.master_key is not None:
        master = vault.master_key_from_env(settings.master_key.get_secret_value())
    else:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        master = vault.load_or_create_master_key(settings.master_key_path)
    if settings.is_postgres:
        url, schema = split_postgres_url(str(settings.database_url))
        return vault.SqlSecretVault.postgres(with_search_path(url, schema), master)
    return vault.SqlSecretVault.sqlite(settings.data_dir / "vault.db", master)


def with_search_path(url: str, schema: str) -> str:
    """A libpq URL whose sessions use `schema` first (the vault's tables live beside the events)."""
    parts = urlsplit(url)
    query = [*parse_qsl(parts.query), ("options", f"-csearch_path={schema}")]
    return urlunsplit(parts._replace(query=urlencode(query)))


def default_compute(settings: Settings) -> ComputeProvider:
    """TENSORANT_RUNPOD_API selects GraphQL (the SDK's API) or REST v2; billing is REST v2."""
    from adapters.runpod import make_compute

    return make_compute(settings.runpod_api, settings.runpod_api_base_url)


def default_objects(settings: Settings) -> ObjectStore:
    from adapters.objectstore import S3ObjectStore

    built: ObjectStore = S3ObjectStore(
        settings.runpod_s3_endpoint_template, settings.s3_allow_endpoints
    )
    return built


def log_store_url(settings: Settings) -> str:
    if settings.is_postgres:
        url, schema = split_postgres_url(str(settings.database_url))
        return f"{url}{'&' if '?' in url else '?'}schema={schema}"
    return f"sqlite:///{(settings.data_dir / 'logs.db').resolve()}"


def trainer_secret(settings: Settings) -> bytes:
    """The key of the per-run trainer tokens: derived from the master key, stable on restart.

    Every process of a deployment shares the master key, so a token minted by the worker that
    launched a Pod is accepted by whichever API process the trainer calls back.
    """
    import hashlib
    import hmac

    from adapters import vault

    if settings.master_key is not None:
        master = vault.master_key_from_env(settings.master_key.get_secret_value())
    else:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        master = vault.load_or_create_master_key(settings.master_key_path)
    return hmac.new(master, b"tensorant trainer tokens v1", hashlib.sha256).digest()


@dataclass
class Container:
    """Everything a process needs, built once; the API keeps it in `app.state`."""

    settings: Settings
    app: TensorantApp
    views: ViewStore
    projections: ProjectionSet
    clock: Clock
    logs: LogStore
    live_pods: Any = None
    closers: list[Any] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.live_pods is None:
            self.live_pods = self.app.run_index.live_pods

    def start_reactions(self, *, worker: bool, relay: bool) -> None:
        """Broker, worker and outbox relay; closers run in reverse (relay, worker, broker)."""
        from adapters.broker import EmbeddedWorker, make_broker, register_actors
        from adapters.relay import Relay

        actors = register_actors(
            make_broker(self.settings.broker_url),
            self.app.drive_run,
            reconcile=self.app.reconcile_tick,
            queue_name=self.settings.queue_name,
        )
        self.closers.append(actors.broker.close)
        if worker:
            w = EmbeddedWorker(actors)
            w.start()
            self.closers.append(w.stop)
        if relay:
            r = Relay(
                self.app,
                self.views,
                actors,
                poll_interval=self.settings.projection_poll_interval,
                reconcile_interval=self.settings.reconcile_interval,
            )
            r.start()
            self.closers.append(r.stop)
            self._start_billing_loop()

    def reconcile_billing_all(self, days: int = 3) -> int:
        """B4: read RunPod's hourly bill for every connected organization (idempotent)."""
        from application.billing import reconcile_billing
        from projections.billing import ViewOwnedResources
        from projections.views import CONNECTIONS, ORGANIZATIONS

        owned = ViewOwnedResources(self.views)
        start = self.clock.now() - timedelta(days=days)
        recorded = 0
        for org_id, _, _ in list(self.views.iter_all(ORGANIZATIONS)):
            card = self.views.get(CONNECTIONS, org_id, "compute") or {}
            if card.get("status") != "connected":
                continue
            try:
                recorded += reconcile_billing(self.app, org_id, owned, start).charges_recorded
            except Exception:  # one organization's bill must not stop the others
                log.exception("billing reconciliation of organization %s failed", org_id)
        return recorded

    def _start_billing_loop(self) -> None:
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(self.settings.billing_reconcile_interval):
                self.reconcile_billing_all()

        t = threading.Thread(target=loop, name="billing-reconciler", daemon=True)
        t.start()
        self.closers.append(stop.set)

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

    def close(self) -> None:
        self.projections.stop()
        for closer in reversed(self.closers):
            try:
                closer()
            except Exception:  # closing must not hide the first error
                log.exception("closing %r failed", closer)
        self.views.close()
        self.app.close()


def build(
    settings: Settings | None = None,
    *,
    compute: ComputeProvider | None = None,
    objects: ObjectStore | None = None,
    vault: SecretVault | None = None,
    clock: Clock | None = None,
) -> Container:
    """Build the process's object graph; ports not given are the real adapters."""
    settings = settings or Settings()
    if not settings.is_postgres:
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    vault = vault or default_vault(settings)
    views = open_view_store(view_store_url(settings))
    closers: list[Any] = []
    run_locks = None
    if settings.is_postgres:
        from adapters.run_locks import PostgresRunLocks

        run_locks = PostgresRunLocks(split_postgres_url(str(settings.database_url))[0])
        closers.append(run_locks.close)
    app = TensorantApp(
        env=eventsourcing_env(settings),
        compute=compute or default_compute(settings),
        objects=objects or default_objects(settings),
        vault=vault,
        clock=clock or SystemClock(),
        run_settings=RunSettings(
            trainer_image=settings.trainer_image,
            public_url=settings.public_url,
            trainer_secret=trainer_secret(settings),
            max_termination_attempts=settings.max_termination_attempts,
            termination_backoff_s=settings.termination_backoff_seconds,
            account_refresh_interval_s=settings.account_refresh_interval,
        ),
        run_index=ViewRunIndex(views),
        run_locks=run_locks,
    )
    projections = ProjectionSet([Projector(app, views, p) for p in all_projections()])
    logs = open_log_store(log_store_url(settings), max_lines=settings.log_max_lines)
    closers.append(logs.close)
    close_vault = getattr(vault, "close", None)
    if callable(close_vault):
        closers.append(close_vault)
    return Container(
        settings=settings,
        app=app,
        views=views,
        projections=projections,
        clock=app.clock,
        logs=logs,
        closers=closers,
    )


def sandbox_settings(settings: Settings, sandbox: Any) -> Settings:
    """Point the adapters at a running sandbox; the SSRF guard allow-lists its S3 front."""
    creds = sandbox.credentials()
    return settings.model_copy(
        update={
            "runpod_api_base_url": sandbox.base_url,
            "runpod_s3_endpoint_template": creds["s3_endpoint_template"],
            "s3_allow_endpoints": [*settings.s3_allow_endpoints, sandbox.base_url + "/"],
        }
    )


def build_for_sandbox(settings: Settings, sandbox: Any, **ports: Any) -> Container:
    """`serve --sandbox`, the demo and the e2e tests: real adapters, the sandbox's clock."""
    return build(sandbox_settings(settings, sandbox), clock=sandbox.clock, **ports)
