"""Tune → Runs: the list, a run's page (Launch trial with its price, live Training logs,
Recover your adapter, resume, release, cancel) and its progress fragment (R4–R13)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Header, Query, Request
from fastapi.responses import Response
from starlette.datastructures import UploadFile

from api.actions import connections, logs, projects, runs
from api.console.configure import gpus
from api.console.curve import curve
from api.console.forms import Errors, status_of, submit, text
from api.console.kept import render_kept
from api.console.run_rows import run_rows
from api.console.web import (
    Page,
    SignedIn,
    checked_form,
    pages,
    read_signed_in,
    redirect,
    render,
)
from api.console.words import people
from api.run_list import presented_runs
from api.schemas.common import MAX_CURSOR
from api.schemas.runs import LaunchIn, ReleaseIn, ResumeIn
from domain.errors import DomainError, TensorantError
from domain.run import TERMINAL

router = pages()
Form = dict[str, Any]
MAX_CURVE_PAGES = 5  # of 1,000 metric points


@router.get("/runs")
async def runs_page(request: Request) -> Response:
    return await read_signed_in(request, _runs_page)


def _runs_page(p: Page) -> Response:
    backend = p.backend
    shown = presented_runs(
        backend.views, p.me.org_id, backend.clock.now(), backend.services.report_reads
    )
    rows = run_rows(shown, newest_first=True)
    return render_kept(p, "runs.html", rows, rows=rows)


def _status(p: Page, run_id: str, errors: Errors, confirm: str | None) -> dict[str, Any]:
    """What the run's status fragment shows, from one reading of the run: state, Pod, adapter,
    progress, the actions and the history always agree."""
    backend = p.backend
    run = runs.run(backend=backend, caller=p.me, run_id=run_id)
    history = runs.history(backend=backend, caller=p.me, run_id=run_id, after=0, limit=500)
    price = None
    if run.state == "draft" and confirm == "launch":
        offers, _ = gpus(p)
        price = next((g.price_per_hour for g in offers if g.id == run.gpu_type_id), None)
    terminal = run.state in TERMINAL
    drawn = None
    if run.state != "draft":  # R17: the curve of the metric points kept so far
        drawn = curve(_metric_points(p, run_id))
    return {
        "run": run,
        "curve": drawn,
        "history": history.events,
        "confirm": confirm,
        "price": price,
        "storage": connections.storage_card(views=backend.views, org_id=p.me.org_id),
        "terminal": terminal,
        # Refreshed until nothing more can change (a Pod still releasing after a terminal
        # state); not a draft (it changes only when asked, on this page); not under a dialog.
        "polling": confirm is None
        and run.state != "draft"
        and (not terminal or run.cleanup.pod_status in ("running", "terminating")),
        "errors": errors,
        "people": people(backend.views, p.me.org_id),
    }


def _metric_points(p: Page, run_id: str) -> list[Any]:
    """The run's metric points for its curve: the first `MAX_CURVE_PAGES` pages (a long run's
    curve stops there; the API pages on)."""
    points: list[Any] = []
    after = 0
    for _ in range(MAX_CURVE_PAGES):
        page = logs.metrics(backend=p.backend, caller=p.me, run_id=run_id, after=after, limit=1000)
        points += page.points
        if len(page.points) < 1000:
            break
        after = page.next_after
    return points


def _run(p: Page, run_id: str, errors: Errors, confirm: str | None = None) -> Response:
    """The run's page: its name (project · kind · short id), the status fragment, the logs."""
    context = _status(p, run_id, errors, confirm)
    try:
        project = projects.project(
            views=p.backend.views, caller=p.me, project_id=context["run"].project_id
        )
        context["project_name"] = project.name
    except TensorantError:
        context["project_name"] = None
    return render(p, "run.html", status=status_of(errors), **context)


@router.get("/runs/{run_id}")
def run_page(
    run_id: str, p: SignedIn, confirm: Annotated[str | None, Query(max_length=20)] = None
) -> Response:
    return _run(p, run_id, {}, confirm)


@router.get("/runs/{run_id}/status")
def run_status(run_id: str, p: SignedIn) -> Response:
    """The status fragment the run page refreshes (htmx) while the run can still change."""
    return render(p, "_run_status.html", **_status(p, run_id, {}, None))


@router.get("/runs/{run_id}/logs/stream")
async def run_logs(
    request: Request,
    run_id: str,
    p: SignedIn,
    last_event_id: Annotated[str | None, Header()] = None,
    after: Annotated[int, Query(ge=0, le=MAX_CURSOR)] = 0,
) -> Response:
    """Training logs: the API's own Server-Sent Events stream (and caps), with the session's
    caller."""
    return await logs.stream(
        request=request,
        backend=p.backend,
        caller=p.me,
        run_id=run_id,
        last_event_id=last_event_id,
        after=after,
    )


# ---------------------------------------------------------------- the run's commands
# Each button posts to /runs/{id}/<command> (`COMMANDS`): the API's action of that name.
Command = Callable[[Page, str, Form], object]


def _launch(p: Page, run_id: str, form: Form) -> object:
    body = LaunchIn.model_validate(
        {
            "confirm": form.get("confirm") == "true",
            "accepted_price_per_hour": text(form, "accepted_price_per_hour") or None,
        }
    )
    return runs.launch(backend=p.backend, caller=p.me, run_id=run_id, body=body)


def _cancel(p: Page, run_id: str, form: Form) -> object:
    return runs.cancel(backend=p.backend, caller=p.me, run_id=run_id)


def _verify(p: Page, run_id: str, form: Form) -> object:
    return runs.recover_from_volume(backend=p.backend, caller=p.me, run_id=run_id)


def _upload(p: Page, run_id: str, form: Form) -> object:
    """Verify and recover (custom S3): the adapter.zip retrieved from the Pod."""
    file = form.get("file")
    if not isinstance(file, UploadFile) or not file.filename:
        raise DomainError("choose the adapter.zip retrieved from the Pod", rule="upload")
    return runs.recover_from_upload(
        backend=p.backend, caller=p.me, run_id=run_id, adapter_zip=file.file
    )


def _resume(p: Page, run_id: str, form: Form) -> object:
    body = ResumeIn(confirm_billing=form.get("confirm_billing") == "true")
    return runs.resume(backend=p.backend, caller=p.me, run_id=run_id, body=body)


def _release(p: Page, run_id: str, form: Form) -> object:
    body = ReleaseIn(confirm_delete_unverified=form.get("confirm_delete_unverified") == "true")
    return runs.release(backend=p.backend, caller=p.me, run_id=run_id, body=body)


def _discard(p: Page, run_id: str, form: Form) -> object:
    runs.discard(backend=p.backend, caller=p.me, run_id=run_id)
    return None


# Commands that destroy or bill: the page asks first (a dialog, a page of its own without
# scripts), and a post without the dialog's `confirmed` shows that question instead of acting.
ASKED = ("cancel", "resume", "release")
COMMANDS: dict[str, Command] = {
    "launch": _launch,
    "cancel": _cancel,
    "verify": _verify,
    "upload": _upload,
    "resume": _resume,
    "release": _release,
    "discard": _discard,
}


@router.post("/runs/{run_id}/{command}")
async def run_command(run_id: str, command: str, request: Request, p: SignedIn) -> Response:
    form = await checked_form(request, p)
    p.require("manage_runs")
    if command not in COMMANDS:
        return render(p, "error.html", status=404, message="no such action")
    errors: Errors = {}
    if command in ASKED and form.get("confirmed") != "yes":
        return _run(p, run_id, errors, command)  # ask first: what happens to money and files
    if submit(p, errors, command, lambda: COMMANDS[command](p, run_id, form)):
        return redirect("/runs" if command == "discard" else f"/runs/{run_id}")
    return _run(p, run_id, errors, command if command in ("launch", *ASKED) else None)
