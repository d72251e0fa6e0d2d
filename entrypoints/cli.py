"""The `tensorant` command line (typer): it parses and calls; the processes it starts live in
`entrypoints.processes`, the demo in `entrypoints.demo`."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from domain.access import ROLES
from domain.errors import TensorantError
from entrypoints.client_cli import datasets_cli, runs_cli
from entrypoints.settings import Settings

if TYPE_CHECKING:  # the server's stack loads only for the commands that use it
    from application.organizations import OrganizationService
    from entrypoints.bootstrap import Container

cli = typer.Typer(
    help="Tensorant control plane for RunPod.", no_args_is_help=True, pretty_exceptions_enable=False
)
admin = typer.Typer(help="Organizations and members.", no_args_is_help=True)
sandbox_cli = typer.Typer(help="The bundled RunPod sandbox.", invoke_without_command=True)
export_cli = typer.Typer(help="Cost reports.", no_args_is_help=True)
audit_cli = typer.Typer(help="Audit history.", no_args_is_help=True)
projections_cli = typer.Typer(help="Read models.", no_args_is_help=True)
cli.add_typer(admin, name="admin")
cli.add_typer(sandbox_cli, name="sandbox")
cli.add_typer(export_cli, name="export")
cli.add_typer(audit_cli, name="audit")
cli.add_typer(projections_cli, name="projections")
cli.add_typer(datasets_cli, name="datasets")
cli.add_typer(runs_cli, name="runs")

console = Console()
err = Console(stderr=True)

Host = Annotated[str, typer.Option(help="Interface to listen on.")]
SandboxPort = Annotated[int, typer.Option("--port", help="Sandbox port.")]


@cli.command()
def serve(
    host: Host = "127.0.0.1",
    port: Annotated[int, typer.Option(help="API port.")] = 8000,
    sandbox: Annotated[bool, typer.Option(help="Run the RunPod sandbox in-process.")] = False,
    sandbox_port: Annotated[int, typer.Option(help="Port of the in-process sandbox.")] = 8181,
) -> None:
    """The API with the embedded projectors (and, with --sandbox, the RunPod sandbox)."""
    from entrypoints import processes

    processes.serve(Settings(), host, port, sandbox_port if sandbox else None, console)


@sandbox_cli.callback()
def sandbox_serve(ctx: typer.Context, port: SandboxPort = 8181, host: Host = "127.0.0.1") -> None:
    """Serve the RunPod sandbox alone."""
    if ctx.invoked_subcommand is not None:
        return
    from runpod_sandbox import serve as serve_sandbox

    serve_sandbox(host, port)


@sandbox_cli.command("credentials")
def sandbox_credentials(port: SandboxPort = 8181, host: Host = "127.0.0.1") -> None:
    """Print the seeded account's keys, S3 key pair and volumes as JSON (no server needed)."""
    from runpod_sandbox import seeded_credentials

    typer.echo(json.dumps(seeded_credentials(port, host), indent=2))


@admin.command("create-org")
def create_org(
    name: str,
    mode: Annotated[str, typer.Option(help="own | provided")] = "own",
) -> None:
    """Create an organization; prints its id."""
    from entrypoints.bootstrap import build

    container = build(Settings())
    try:
        org_id = container.services.organizations.create(name, mode)
        container.catch_up()
    finally:
        container.close()
    typer.echo(org_id)


ExpiresInDays = Annotated[
    int | None, typer.Option(min=1, max=3650, help="The token stops working after this many days.")
]
OPERATOR = "operator"


@contextmanager
def _members() -> Iterator[tuple[OrganizationService, Container]]:
    """The organization service for one command; a refusal is one line on stderr, exit 1."""
    from entrypoints.bootstrap import build

    container = build(Settings())
    try:
        yield container.services.organizations, container
        container.catch_up()
    except TensorantError as e:
        err.print(f"refused ({e.problem}): {e.detail}")
        raise typer.Exit(1) from None
    finally:
        container.close()


@admin.command("add-member")
def add_member(
    org_id: str,
    email: str,
    role: Annotated[str, typer.Option(help=" | ".join(ROLES))],
    expires_in_days: ExpiresInDays = None,
) -> None:
    """Add a member; prints the new bearer token once (only its hash is stored)."""
    with _members() as (orgs, _):
        member = orgs.add_member(org_id, email, role, OPERATOR, expires_in_days)
    typer.echo(member.token)


@admin.command("list-members")
def list_members(org_id: str) -> None:
    """The organization's members as JSON (never a token or its hash)."""
    with _members() as (orgs, container):
        orgs.log.organization(org_id)  # an unknown organization is refused, not an empty list
        container.catch_up()
        from projections.views.identity import ROSTER

        docs = [doc for _, doc in container.views.list(ROSTER, org_id, "member:")]
    typer.echo(json.dumps(docs, indent=2))


@admin.command("remove-member")
def remove_member(org_id: str, user_id: str) -> None:
    """Remove a member: their token is refused from the next request on, on every process."""
    with _members() as (orgs, _):
        orgs.remove_member(org_id, user_id, OPERATOR)
    typer.echo(f"removed {user_id}")


@admin.command("set-role")
def set_role(
    org_id: str, user_id: str, role: Annotated[str, typer.Option(help=" | ".join(ROLES))]
) -> None:
    """Change a member's role (the last owner cannot be demoted)."""
    with _members() as (orgs, _):
        orgs.change_role(org_id, user_id, role, OPERATOR)
    typer.echo(f"{user_id} is now {role}")


@admin.command("rotate-token")
def rotate_token(org_id: str, user_id: str, expires_in_days: ExpiresInDays = None) -> None:
    """Replace a member's token (e.g. a lost one); prints the new token once."""
    with _members() as (orgs, _):
        member = orgs.rotate_token(org_id, user_id, OPERATOR, expires_in_days, may_lengthen=True)
    typer.echo(member.token)


@cli.command()
def worker() -> None:
    """A scale-out worker: consumes the broker (TENSORANT_BROKER_URL) and drives runs."""
    from entrypoints import processes

    settings = Settings()
    if not settings.broker_url:
        err.print(
            "set TENSORANT_BROKER_URL (amqp://... or redis://...); the embedded default "
            "runs its worker inside `tensorant serve`"
        )
        raise typer.Exit(2)
    processes.worker(settings)


@cli.command()
def projector() -> None:
    """A scale-out projector: keeps the views current and relays run events to the broker."""
    from entrypoints import processes

    processes.projector(Settings(), console)


@export_cli.command("costs")
def export_costs(
    org: Annotated[str, typer.Option(help="Organization id.")],
    from_: Annotated[str | None, typer.Option("--from", help="Start (UTC ISO 8601).")] = None,
    to: Annotated[str | None, typer.Option(help="End, exclusive (UTC ISO 8601).")] = None,
    format_: Annotated[
        str, typer.Option("--format", help="focus-csv | focus-parquet | csv")
    ] = "focus-csv",
    output: Annotated[Path | None, typer.Option(help="File to write.")] = None,
) -> None:
    """Write a cost report (FOCUS 1.2 CSV/Parquet, or a plain CSV summary)."""
    from entrypoints.bootstrap import build
    from projections.reports.costs import export, period

    container = build(Settings())
    try:
        container.catch_up()
        now = container.clock.now()
        lo, hi = period(from_, to, now)
        body, _, name = export(container.views, org, lo, hi, now, format_)
    finally:
        container.close()
    target = output or Path(name)
    target.write_bytes(body)
    typer.echo(str(target))


@audit_cli.command("verify")
def audit_verify(
    org: Annotated[str | None, typer.Option(help="Organization id.")] = None,
    anchor: Annotated[
        Path | None,
        typer.Option(
            help="An earlier output of this command, kept outside the database: each"
            " organization's head in it must still be in the recomputed chain.",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
) -> None:
    """Check the hash chain over the event log; exits 1 when an event was altered or removed.

    Prints JSON with each organization's head (position, hash); `> anchor.json` keeps it.
    """
    from projections.views.audit import anchors_from, verify

    anchors = anchors_from(anchor.read_text()) if anchor is not None else None
    from entrypoints.bootstrap import build

    container = build(Settings())
    try:
        container.catch_up()
        result = verify(container.services.log, container.views, org, anchors=anchors).as_dict()
    finally:
        container.close()
    typer.echo(json.dumps(result))
    raise typer.Exit(0 if result["ok"] else 1)


@projections_cli.command("rebuild")
def projections_rebuild(
    name: Annotated[str | None, typer.Argument(help="One view; all when omitted.")] = None,
    processes: Annotated[
        int,
        typer.Option(
            min=1,
            help="Share the views among this many processes, each reading the log (one core"
            " each); every view is still rebuilt whole, but not all in one transaction.",
        ),
    ] = 1,
) -> None:
    """Rebuild views from the event log."""
    from entrypoints.bootstrap import build, open_for_rebuild
    from projections.store.engine import rebuild_views_in_processes

    container = build(Settings())
    try:
        names = list(container.projections.projectors)
        if name is not None and name not in names:
            err.print(f"unknown view {name!r}; views: {', '.join(names)}")
            raise typer.Exit(2)
        if name is None and processes > 1:
            views = [(p.view, p.projection) for p in container.projections.projectors.values()]
            stats = rebuild_views_in_processes(open_for_rebuild, views, processes)
            for view, events in stats.events.items():
                typer.echo(f"{view}: {events} events")
        elif name is None:  # every view from one read of the log
            for view, events in container.projections.rebuild().items():
                typer.echo(f"{view}: {events} events")
        else:
            typer.echo(f"{name}: {container.projections[name].rebuild()} events")
    finally:
        container.close()


@cli.command()
def demo() -> None:
    """Walk the guide end to end against the sandbox; exits 0 when every step passed."""
    from entrypoints.demo.run import run_demo

    raise typer.Exit(run_demo(console))


def main() -> None:
    """Console-script entry point (`tensorant`)."""
    from domain.errors import TensorantError

    try:
        cli()
    except TensorantError as e:
        err.print(f"[red]{e.title}[/red]: {e.detail}")
        raise SystemExit(1) from None
