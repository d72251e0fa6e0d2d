"""The long-running processes: the API (`serve`), a scale-out worker and a scale-out projector.

The CLI parses arguments and calls these; each builds its container from the settings and
closes it on the way out.
"""

from __future__ import annotations

import json
import signal
import threading

from rich.console import Console

from adapters.logging_setup import configure
from entrypoints.bootstrap import Container, build, build_for_sandbox
from entrypoints.settings import Settings
from projections.views.identity import ORGANIZATIONS


def configure_logging(settings: Settings) -> None:
    configure(settings.log_level, settings.log_format)


def _has_organization(container: Container) -> bool:
    container.catch_up()
    return any(True for _ in container.views.iter_all(ORGANIZATIONS))


def serve(
    settings: Settings, host: str, port: int, sandbox_port: int | None, console: Console
) -> None:
    """O1: the API with the embedded projectors; with `sandbox_port`, the RunPod sandbox too
    (an empty data directory gets an organization and its owner's token, printed once)."""
    import uvicorn  # the API's imports stay out of the worker's start-up

    from api.app import create_app
    from entrypoints.server import Server, bounded_http, console_hint

    configure_logging(settings)
    settings = settings.listening_on(host, port)
    box = None
    if sandbox_port is not None:
        from runpod_sandbox import Sandbox

        box = Sandbox(host, sandbox_port).start()
        container = build_for_sandbox(settings, box)
        console.print(f"RunPod sandbox on {box.base_url}")
        if not _has_organization(container):
            orgs = container.services.organizations
            org_id = orgs.create("Sandbox organization")
            owner = orgs.add_member(org_id, "owner@sandbox.tensorant.dev", "owner")
            container.catch_up()
            console.print(f"Created organization {org_id}")
            console.print(f"Owner token (shown once): [bold]{owner.token}[/bold]")
            console.print("Sandbox credentials:")
            console.print_json(json.dumps(box.credentials()))
    else:
        container = build(settings)
    for line in report_channels(container.settings):
        console.print(line)
    shown_host = "127.0.0.1" if host in ("0.0.0.0", "::") else host  # noqa: S104 - a comparison
    hint = "the owner token above" if sandbox_port is not None else "a member token"
    console.print(console_hint(f"http://{shown_host}:{port}", hint))
    try:
        config = uvicorn.Config(
            create_app(lambda: container, run_projectors=settings.api_projectors),
            host=host,
            port=port,
            log_level=settings.log_level.lower(),
            access_log=False,
            proxy_headers=False,  # N7: X-Forwarded-For is read by api/client_address.py
            timeout_graceful_shutdown=max(1, round(settings.shutdown_grace_s)),
            http=bounded_http(settings.header_read_timeout_s),
        )
        Server(config, settles_gc=True).run()
    finally:
        if box is not None:
            box.stop()


def report_channels(settings: Settings) -> list[str]:
    """How trainers' reports reach this deployment, as printed at start-up."""
    lines = [
        f"Reports reach this server: callbacks at {settings.callback_url}"
        " (set TENSORANT_PUBLIC_URL when Pods reach it by another address)",
        "  and the storage mailbox (runs/<id>/status.json, result.json, logs/), read every"
        f" {settings.reconcile_interval:g} s, which needs no inbound connection",
    ]
    if settings.runpod_api == "rest":
        lines.append("  and RunPod's Pod logs (REST v2), followed while a run trains")
    else:
        lines.append("  (Pod-log following needs TENSORANT_RUNPOD_API=rest)")
    return lines


def worker(settings: Settings) -> None:
    """O2: consume the broker and drive runs until SIGTERM/SIGINT."""
    from adapters.broker import run_worker
    from adapters.broker_dedupe import PostgresDedupe

    configure_logging(settings)
    assert settings.broker_url, "a scale-out worker needs TENSORANT_BROKER_URL"
    container = build(settings)
    container.start_followers()
    dedupe = None
    if settings.is_postgres:
        pg = settings.postgres
        dedupe = PostgresDedupe(pg.conninfo, schema=pg.schema)
    try:
        run_worker(
            settings.broker_url,
            container.services.reactor.drive_run,
            reconcile=container.services.reactor.reconcile_tick,
            dedupe=dedupe,
            queue_name=settings.queue_name,
        )
    finally:
        container.close()


def projector(settings: Settings, console: Console) -> None:
    """O2: keep the views current, relay run events to the broker and run the tickers."""
    configure_logging(settings)
    container = build(settings)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        container.projections.start(settings.projection_poll_interval)
        container.start_reactions(worker=False, relay=True)
        console.print("projector running (views and outbox relay); Ctrl-C stops it")
        stop.wait()
    finally:
        container.close()
