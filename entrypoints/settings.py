"""Operator configuration: environment variables prefixed `TENSORANT_` (docs/configuration.md),
read once per process by the composition root."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from application.run_settings import PUBLIC_BASE_IMAGE
from projections.store.urls import PostgresUrl, is_postgres_url, parse_postgres_url

RUNPOD_API_BASE_URL = "https://api.runpod.io"
RUNPOD_S3_ENDPOINT_TEMPLATE = "https://s3api-{dc}.runpod.io"
DEFAULT_PUBLIC_URL = "http://127.0.0.1:8000"
WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")  # noqa: S104 - names, not a bind


def listener_url(host: str, port: int) -> str:
    """The URL of a listener: a wildcard host is reached on the loopback address."""
    if host in WILDCARD_HOSTS:
        host = "127.0.0.1"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}"


class Settings(BaseSettings):
    """Everything an operator may set; nothing here connects to anything."""

    model_config = SettingsConfigDict(env_prefix="TENSORANT_", extra="ignore")

    data_dir: Path = Field(default=Path("./data"), description="Embedded-default data directory.")
    database_url: str | None = Field(
        default=None,
        description="Event store: postgresql://user:pass@host:port/db[?schema=s]; "
        "default SQLite in DATA_DIR.",
    )
    view_database_url: str | None = Field(
        default=None,
        description="View store; default: a separate SQLite file in DATA_DIR, or the "
        "PostgreSQL database of DATABASE_URL.",
    )
    broker_url: str | None = Field(
        default=None, description="amqp:// or redis://; default: in-process broker."
    )
    db_pool_size: int = Field(
        default=8,
        ge=1,
        le=64,
        description="Connections the event store keeps open per process on PostgreSQL "
        "(it may open as many again under load), and the most the view store's pool opens.",
    )
    queue_name: str = Field(
        default="tensorant",
        description="The broker queue this deployment's workers consume (one per deployment).",
    )
    master_key: SecretStr | None = Field(
        default=None, description="Base64 master key; default: DATA_DIR/master.key (0600)."
    )
    public_url: str | None = Field(
        default=None,
        description="Where trainers reach this API (callbacks); default: where `serve` "
        "listens (http://127.0.0.1:<port> for a wildcard host).",
    )
    runpod_api_base_url: str = RUNPOD_API_BASE_URL
    hf_endpoint: str = Field(
        default="https://huggingface.co",
        description="The Hugging Face Hub the token connection and gated-model checks ask "
        "(a mirror, or the sandbox's /hf in --sandbox).",
    )
    api_projectors: bool = Field(
        default=True,
        description="`serve` runs the views' projectors in its own process. Set false for API "
        "processes of a deployment where `tensorant projector` runs them: a request still "
        "reads its own writes (it applies them itself), and the API's CPU goes to requests.",
    )
    count_tokens: bool = Field(
        default=True,
        description="Count a drafted run's dataset in tokens of its base model's tokenizer "
        "(a child process; the tokenizer files only, never the weights).",
    )
    runpod_s3_endpoint_template: str = RUNPOD_S3_ENDPOINT_TEMPLATE
    s3_allow_endpoints: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Endpoints exempt from the SSRF guard (host:port or URL prefixes).",
    )
    webhook_allow_endpoints: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Webhook URLs exempt from the SSRF guard (host:port or URL prefixes); "
        "they may use http.",
    )
    webhook_backoff_base_s: float = Field(
        default=5.0, gt=0, description="Seconds before a failed webhook delivery's first retry."
    )
    webhook_backoff_max_s: float = Field(
        default=3600.0, gt=0, description="The longest wait between webhook delivery attempts."
    )
    webhook_max_attempts: int = Field(
        default=12, ge=1, description="Attempts before a webhook delivery is marked failed."
    )
    webhook_timeout_s: float = Field(
        default=10.0, gt=0, description="Seconds a webhook receiver has to answer an attempt."
    )
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Reverse proxies (IP addresses or CIDR networks, comma-separated) whose "
        "X-Forwarded-For is believed; from any other peer the header is ignored.",
    )
    serving_cold_start_s: float = Field(
        default=120.0,
        gt=0,
        description="Seconds a chat request through a deployment waits for a worker (a cold "
        "start) before it answers 503 with Retry-After.",
    )
    serving_rate_limit: int = Field(
        default=120,
        ge=0,
        description="Chat requests one organization may send to its deployments per "
        "SERVING_RATE_WINDOW_S (a token bucket shared by every API process); beyond, 429 "
        "chat-rate-limited with Retry-After. 0: no limit.",
    )
    serving_rate_window_s: float = Field(
        default=60.0, gt=0, description="The window (seconds) SERVING_RATE_LIMIT refills over."
    )
    serving_resume_after_s: float = Field(
        default=60.0,
        gt=0,
        description="Seconds a deployment left deploying or deleting (its process died "
        "mid-command) waits before the reconcile tick drives it on, so the tick never races "
        "a command still driving it.",
    )
    serving_endpoints_interval: float = Field(
        default=20.0,
        gt=0,
        description="Seconds between two looks at one organization's serving endpoints (what "
        "they bill, orphans); each look spends the key's RunPod quota the Pods' calls use.",
    )
    read_your_writes_timeout: float = Field(
        default=5.0, description="Seconds a command waits for the views to reflect it."
    )
    projection_poll_interval: float = 0.5
    auth_failure_limit: int = Field(
        default=20,
        ge=1,
        description="Failed authentications from one address per window before a 429.",
    )
    check_failure_limit: int = Field(
        default=5,
        ge=1,
        description="Failed RunPod key or storage checks of one organization per window "
        "before a 429.",
    )
    failure_window_s: float = Field(
        default=60.0, gt=0, description="The window (seconds) the failure limits count in."
    )
    max_body_bytes: int = Field(
        default=1024 * 1024,
        ge=1024,
        description="The largest request body outside uploads (JSON, forms); more is a 413.",
    )
    header_read_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="Seconds a connection has to send a request's headers before it is closed.",
    )
    body_read_timeout_s: float = Field(
        default=30.0, gt=0, description="Seconds a request body may pause before a 408."
    )
    stream_limit_per_caller: int = Field(
        default=100, ge=1, description="Log streams (SSE) one member may hold open at once."
    )
    stream_limit_per_org: int = Field(
        default=250, ge=1, description="Log streams an organization's members may hold open."
    )
    stream_limit_total: int = Field(
        default=2000, ge=1, description="Log streams one API process serves at once."
    )
    stream_keepalive_s: float = Field(
        default=15.0, gt=0, description="Seconds between keep-alive comments on a quiet stream."
    )
    shutdown_grace_s: float = Field(
        default=10.0,
        ge=0,
        description="Seconds a stopping API waits for requests in flight (streams end at once).",
    )
    runpod_api: Literal["graphql", "rest"] = Field(
        default="rest",
        description="RunPod API for compute: rest (v2, the default) or graphql (the SDK's, "
        "retired in early 2027).",
    )
    trainer_image: str = Field(
        default="",
        description="A baked trainer image (trainer/Dockerfile); empty: the public base image "
        "plus the trainer bundle the Pod installs itself (docs/runpod.md).",
    )
    trainer_base_image: str = Field(
        default=PUBLIC_BASE_IMAGE,
        description="The public image a Pod starts from when no trainer image is set "
        "(RunPod's official PyTorch image for CUDA 13; `tag@sha256:digest` pins it).",
    )
    max_dataset_bytes: int = Field(
        default=1024**3, ge=1, description="The largest dataset an upload or registration takes."
    )
    reconcile_interval: float = Field(
        default=30.0, description="Seconds between reconciliations with RunPod."
    )
    reconcile_threads: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Organizations one reconcile pass takes at once (a pass mostly waits on "
        "RunPod and storage; run locks share one connection, reads borrow a pooled one).",
    )
    reconcile_shards: int = Field(
        default=1,
        ge=1,
        le=256,
        description="Reconcile messages per tick, each for a share of the organizations (by "
        "their id), so that several workers take one tick's pass between them.",
    )
    reconcile_idle_every: int = Field(
        default=1,
        ge=1,
        le=60,
        description="An organization with no live run, orphan or deployment is compared with "
        "RunPod once in this many reconcile passes (spread over them by its id); 1: every "
        "pass. Organizations with something live are compared every pass.",
    )
    max_termination_attempts: int = Field(
        default=5, description="Failed terminations before a Pod needs manual cleanup."
    )
    termination_backoff_seconds: float = Field(
        default=5.0, description="First wait between termination attempts (doubles each time)."
    )
    account_refresh_interval: float = Field(
        default=60.0,
        description="Seconds between reads of each connected account's balance and spend.",
    )
    balance_warning_days: float = Field(
        default=7.0, description="Warn when the balance covers fewer days of Pods and storage."
    )
    stall_after: float = Field(
        default=600.0,
        description="Seconds without any report (callback, mailbox, Pod logs) while the Pod "
        "runs before a run shows stalled_since; a run that trained is then stopped and "
        "retained (trainer_stalled).",
    )
    boot_deadline_minutes: float = Field(
        default=25.0,
        gt=0,
        description="Minutes after a Pod's creation without any report (callback, mailbox, Pod "
        "logs) before it is terminated and its run fails (image_unavailable, cuda_unavailable "
        "or trainer_never_started).",
    )
    stop_after_grace_minutes: float = Field(
        default=10.0,
        ge=0,
        description="Minutes after a run's runtime limit when RunPod stops the Pod itself "
        "(stopAfter), in case no worker does.",
    )
    pod_log_followers: int = Field(
        default=16,
        description="Pod-log streams (REST v2) one worker follows at most at a time.",
    )
    log_max_lines: int = Field(default=5000, description="Trainer log lines kept per run.")
    billing_reconcile_interval: float = Field(
        default=900.0, description="Seconds between reads of RunPod's hourly bill (B4)."
    )
    log_level: str = "INFO"
    log_format: Literal["json", "text"] = Field(
        default="json", description="json: one object per line with request ids; text: for humans."
    )

    @field_validator(
        "s3_allow_endpoints", "webhook_allow_endpoints", "trusted_proxies", mode="before"
    )
    @classmethod
    def _comma_separated(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [v.strip() for v in value.split(",") if v.strip()]
        return value

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"{item!r} is not an IP address or network") from None
        return value

    @property
    def is_postgres(self) -> bool:
        return bool(self.database_url) and is_postgres_url(str(self.database_url))

    @property
    def postgres(self) -> PostgresUrl:
        """DATABASE_URL as every PostgreSQL store reads it (only when `is_postgres`)."""
        if not self.is_postgres:
            msg = "TENSORANT_DATABASE_URL is not a postgresql:// URL"
            raise ValueError(msg)
        return parse_postgres_url(str(self.database_url))

    @property
    def callback_url(self) -> str:
        """The public URL, or the default API address when neither it nor a listener is known."""
        return self.public_url or DEFAULT_PUBLIC_URL

    def listening_on(self, host: str, port: int) -> Settings:
        """These settings with the public URL derived from the listener unless one was set."""
        if self.public_url:
            return self
        return self.model_copy(update={"public_url": listener_url(host, port)})

    @property
    def events_path(self) -> Path:
        return self.data_dir / "events.db"

    @property
    def views_path(self) -> Path:
        return self.data_dir / "views.db"

    @property
    def master_key_path(self) -> Path:
        return self.data_dir / "master.key"
