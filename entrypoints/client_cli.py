"""`tensorant datasets …` and `tensorant runs …` (W3): the HTTP API from a terminal, through the
Python client (`tensorant_client`). The server and token come from --url/--token, TENSORANT_URL
and TENSORANT_TOKEN, or ~/.config/tensorant/client.toml."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn
from rich.table import Table

from tensorant_client import ApiError, Client, Run
from tensorant_client.client import ENDED

datasets_cli = typer.Typer(help="Dataset versions of a project.", no_args_is_help=True)
runs_cli = typer.Typer(help="Training runs.", no_args_is_help=True)

console = Console()
err = Console(stderr=True)

Url = Annotated[str | None, typer.Option(help="Server URL (else TENSORANT_URL or the file).")]
Token = Annotated[
    str | None,
    typer.Option(help="Member token (else TENSORANT_TOKEN or the file).", show_default=False),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print the API's JSON.")]


@contextmanager
def _client(url: str | None, token: str | None) -> Iterator[Client]:
    """The client; a refusal ends the command with the server's words and exit code 1."""
    try:
        with Client.from_config(url, token) as client:
            yield client
    except ApiError as e:
        err.print(f"[red]{e.status} {e.type}[/red]: {e.detail or e.title}")
        raise typer.Exit(1) from None
    except ValueError as e:
        err.print(f"[red]{e}[/red]")
        raise typer.Exit(2) from None


def _print(found: Any, as_json: bool, table: Callable[[], Table]) -> None:
    if as_json:
        console.print_json(json.dumps(found))
    else:
        console.print(table())


# ------------------------------------------------------------------ datasets
@datasets_cli.command("upload")
def datasets_upload(
    project_id: str,
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    name: Annotated[str, typer.Option(help="Dataset name.")],
    version: Annotated[str, typer.Option(help="Version label, e.g. v1.")],
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Upload a JSONL file as a dataset version (streamed; checked row by row by the server)."""
    with _client(url, token) as client, _transfer("uploading", file.stat().st_size) as advance:
        found = client.datasets.upload(project_id, file, name, version, progress=advance)
    if as_json:
        console.print_json(json.dumps(found))
    else:
        console.print(
            f"dataset version [bold]{found['id']}[/bold]: {found['name']} {found['version']}, "
            f"{found['row_count']} rows ({found['format']}), sha256 {found['sha256'][:12]}…"
        )


@datasets_cli.command("list")
def datasets_list(
    project_id: str, url: Url = None, token: Token = None, as_json: AsJson = False
) -> None:
    """The project's dataset versions."""
    with _client(url, token) as client:
        found = client.datasets.list(project_id)

    def table() -> Table:
        t = Table("id", "name", "version", "rows", "bytes", "format", "created")
        for d in found:
            t.add_row(
                d["id"], d["name"], d["version"], str(d["row_count"]), str(d["size_bytes"]),
                d["format"], d["created_at"],
            )  # fmt: skip
        return t

    _print(found, as_json, table)


# ------------------------------------------------------------------ runs
@runs_cli.command("create")
def runs_create(
    project: Annotated[str, typer.Option(help="Project id.")],
    dataset: Annotated[str, typer.Option(help="Dataset version id.")],
    base_model: Annotated[str, typer.Option(help="Catalogue id or storage:models/<folder>.")],
    gpu: Annotated[str, typer.Option(help="RunPod GPU type id (GET /v1/gpus).")],
    price_limit: Annotated[str, typer.Option(help="Highest $/hour you accept.")],
    kind: Annotated[str, typer.Option(help="trial or full.")] = "trial",
    max_runtime: Annotated[int, typer.Option(help="Minutes before the Pod is stopped.")] = 60,
    gpu_count: Annotated[int, typer.Option(help="GPUs per Pod.")] = 1,
    baseline: Annotated[str | None, typer.Option(help="A full run's trial run id.")] = None,
    url: Url = None,
    token: Token = None,
    as_json: AsJson = False,
) -> None:
    """Save a draft run; nothing is rented until `tensorant runs launch`."""
    body: dict[str, Any] = {
        "project_id": project,
        "dataset_version_id": dataset,
        "kind": kind,
        "base_model": base_model,
        "gpu_type_id": gpu,
        "gpu_count": gpu_count,
        "price_limit_per_hour": price_limit,
        "max_runtime_minutes": max_runtime,
    }
    if baseline:
        body["baseline_run_id"] = baseline
    with _client(url, token) as client:
        run = client.runs.create(**body)
    if as_json:
        console.print_json(json.dumps(run))
    else:
        console.print(f"draft [bold]{run['id']}[/bold] saved; launch it to rent the Pod")


@runs_cli.command("launch")
def runs_launch(
    run_id: str,
    accept_price: Annotated[
        str | None,
        typer.Option(help="The $/hour you accept (asked for, with the draft's limit, if absent)."),
    ] = None,
    url: Url = None,
    token: Token = None,
) -> None:
    """Rent the run's Pod. GPU billing starts; the hourly price must be accepted."""
    with _client(url, token) as client:
        run = client.runs.get(run_id)
        if accept_price is None:
            limit = run["price_limit_per_hour"]
            accept_price = typer.prompt(
                f"Launching rents a {run['gpu_type_id']} Pod billed by the second on your "
                f"RunPod account (limit ${limit}/hour). Accept which $/hour?",
                default=limit,
            )
        price = str(Decimal(str(accept_price)))
        accepted = client.runs.launch(run_id, price)
    console.print(f"run {run_id}: {accepted['state']}. {accepted['detail']}")


@runs_cli.command("cancel")
def runs_cancel(
    run_id: str,
    yes: Annotated[bool, typer.Option("--yes", help="Do not ask first.")] = False,
    url: Url = None,
    token: Token = None,
) -> None:
    """Cancel a run: its Pod is stopped or terminated; an unverified adapter may be lost."""
    if not yes:
        typer.confirm(
            f"Cancel run {run_id}? Its Pod stops billing; training so far is kept only if "
            "an adapter was verified.",
            abort=True,
        )
    with _client(url, token) as client:
        accepted = client.runs.cancel(run_id)
    console.print(f"run {run_id}: {accepted['state']}. {accepted['detail']}")


def _line(run: Run) -> str:
    progress = run.get("progress") or {}
    parts = [f"[bold]{run['state']}[/bold]"]
    if run.get("state_reason"):
        parts.append(f"({run['state_reason']})")
    if progress.get("phase"):
        step = progress.get("step")
        total = progress.get("total_steps")
        parts.append(f"{progress['phase']}" + (f" step {step}/{total}" if step is not None else ""))
        if progress.get("loss") is not None:
            parts.append(f"loss {float(progress['loss']):.4f}")
    parts.append(f"${run['cost_so_far']}")
    return "  ".join(parts)


@runs_cli.command("watch")
def runs_watch(
    run_id: str,
    interval: Annotated[float, typer.Option(help="Seconds between reads.")] = 1.0,
    timeout: Annotated[float | None, typer.Option(help="Give up after this many seconds.")] = None,
    url: Url = None,
    token: Token = None,
) -> None:
    """Follow a run until it ends, a line per change (state, step, loss, cost so far). Exits 0
    when it succeeded, 1 otherwise."""
    last: Run | None = None
    with _client(url, token) as client:
        try:
            for run in client.runs.watch(run_id, interval, timeout):
                last = run
                console.print(f"{time.strftime('%H:%M:%S')}  {_line(run)}")
        except TimeoutError as e:
            err.print(f"[red]{e}[/red]")
            raise typer.Exit(1) from None
    if last is None or last["state"] != "succeeded":
        raise typer.Exit(1)
    adapter = last.get("adapter")
    if adapter:
        console.print(f"adapter verified: sha256 {adapter['sha256']}")


@runs_cli.command("logs")
def runs_logs(
    run_id: str,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep reading until the run ends.")
    ] = False,
    url: Url = None,
    token: Token = None,
) -> None:
    """The run's training log."""
    after = 0
    with _client(url, token) as client:
        while True:
            page = client.runs.logs(run_id, after)
            for line in page["lines"]:
                console.print(f"{line['time']}  {line['text']}", markup=False, highlight=False)
            after = page["next_after"]
            if page["lines"]:
                continue
            if not follow or client.runs.get(run_id)["state"] in ENDED:
                return
            time.sleep(1.0)


@runs_cli.command("download")
def runs_download(
    run_id: str,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Where to write adapter.zip.")
    ] = Path("adapter.zip"),
    url: Url = None,
    token: Token = None,
) -> None:
    """Write the run's verified adapter, checked against the sha256 the run shows."""
    with _client(url, token) as client:
        got = client.runs.download(run_id, output)
    console.print(f"wrote {got.path} ({got.size_bytes} bytes), sha256 {got.sha256}")


@contextmanager
def _transfer(what: str, total: int) -> Iterator[Callable[[int], None]]:
    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        console=err,
        transient=True,
    ) as bar:
        task = bar.add_task(what, total=total)
        yield lambda n: bar.advance(task, n)
