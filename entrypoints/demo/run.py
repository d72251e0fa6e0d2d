"""`tensorant demo`: the guide, walked through the HTTP API as a real client, against the sandbox.

First the connections, storage and a project (`connections`), then training, recovery, cleanup,
the cost report and the audit check (`training`).
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from pathlib import Path

import httpx
from rich.console import Console

from entrypoints.demo.connections import walk_connections
from entrypoints.demo.training import walk_training
from entrypoints.demo.walk import Walk
from entrypoints.server import serve_with_sandbox
from entrypoints.settings import Settings
from runpod_sandbox import Sandbox


def run_demo(
    console: Console | None = None,
    out_dir: Path | None = None,
    *,
    sandbox: Sandbox | None = None,
    data_dir: Path | None = None,
) -> int:
    """Start sandbox + API on a temporary data directory, walk the guide; 0 when all passed.

    A given `sandbox` and `data_dir` outlive the demo, so what it left behind can be inspected
    (its Pods and bill at RunPod, its event log) without taking its word for it.
    """
    console = console or Console()
    walk = Walk(console)
    for noisy in ("httpx", "tensorant.http", "tensorant.runs", "dramatiq"):
        logging.getLogger(noisy).setLevel(logging.WARNING)  # the step lines are the output
    with contextlib.ExitStack() as owned:
        tmp = data_dir or owned.enter_context(tempfile.TemporaryDirectory(prefix="tensorant-demo-"))
        # The trial runs the real trainer (T2) as the Pod's process, on the CPU.
        sandbox = sandbox or owned.enter_context(Sandbox(trainer="real"))
        settings = Settings(data_dir=Path(tmp), reconcile_interval=1.0)
        server, container = serve_with_sandbox(settings, sandbox)
        try:
            org_id = container.services.organizations.create("Demo organization")
            owner = container.services.organizations.add_member(
                org_id, "owner@demo.tensorant.dev", "owner"
            )
            # The console's token: an auditor's, so that watching cannot change what the walk
            # checks (the owner's token stays the walk's own).
            watcher = container.services.organizations.add_member(
                org_id, "watcher@demo.tensorant.dev", "auditor"
            )
            container.catch_up()
            console.print(
                f"[bold]Tensorant demo[/bold]: API {server.base_url}, RunPod sandbox "
                f"{sandbox.base_url}, data in {tmp}"
            )
            show_console(console, server.base_url, watcher.token)
            with httpx.Client(
                base_url=server.base_url,
                timeout=30,
                headers={"Authorization": f"Bearer {owner.token}"},
            ) as client:
                walk_connections(client, sandbox.credentials(), walk)
                if not walk.failed:
                    walk_training(client, sandbox, out_dir or Path.cwd(), walk, Path(tmp))
        finally:
            server.stop()
    total = walk.passed + len(walk.failed)
    if walk.failed:
        console.print(f"[red]{len(walk.failed)} of {total} steps failed[/red]")
        return 1
    console.print(f"[green]All {total} steps behaved as the guide says.[/green]")
    return 0


def show_console(console: Console, base_url: str, token: str) -> None:
    """Where the demo's console is, and its token: read-only (auditor), while the demo runs."""
    console.print(
        f"Web console: {base_url}/ (while the demo runs). It is read-only: sign in with this "
        "auditor token to watch the runs, projects, cleanup and audit log; it can change "
        "nothing. Token:",
        highlight=False,
    )
    console.print(token, markup=False, highlight=False, soft_wrap=True)
