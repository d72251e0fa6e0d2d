"""The console's pages: each command calls the HTTP API's own route function (the same service,
the same checks, the same events) and each page reads the same views through them."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request, UploadFile
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from starlette.datastructures import UploadFile as StarletteUpload

from api.console.problems import Shown, shown
from api.console.run_rows import run_rows
from api.console.sessions import COOKIE
from api.console.web import (
    ConsoleRoute,
    Page,
    checked_form,
    do,
    page,
    read_signed_in,
    redirect,
    render,
    render_kept,
    set_cookie,
    signed_in,
    status_of,
    store,
)
from api.routes import audit as audit_api
from api.routes import base_models as base_models_api
from api.routes import billing as billing_api
from api.routes import cleanup as cleanup_api
from api.routes import connections as connections_api
from api.routes import gpus as gpus_api
from api.routes import logs as logs_api
from api.routes import projects as projects_api
from api.routes import runs as runs_api
from api.routes import storage as storage_api
from api.run_list import presented_runs
from api.schemas.common import MAX_CURSOR
from api.schemas.connections import ApiKeyIn
from api.schemas.projects import DatasetVersionIn, ProjectIn
from api.schemas.runs import LaunchIn, ReleaseIn, ResumeIn, RunCreate
from api.schemas.storage import ResizeIn, S3StorageIn, VolumeStorageIn
from api.throttle import Throttle, TooManyFailures
from application.organizations import hash_token
from domain.errors import DomainError, TensorantError
from domain.gpus import BASE_MODELS
from domain.run import TERMINAL
from projections.store.base import INDEX
from projections.views.identity import MEMBERS

router = APIRouter(include_in_schema=False, route_class=ConsoleRoute)
PageDep = Annotated[Page, Depends(page)]
SignedIn = Annotated[Page, Depends(signed_in)]


def _count(value: str) -> int | str:
    """A form's digits as the integer the API's strict JSON body would carry (else the text,
    which the API's schema then refuses with its own words)."""
    return int(value) if value.isdigit() else value


def _text(form: dict[str, Any], name: str) -> str:
    value = form.get(name, "")
    return value.strip() if isinstance(value, str) else ""


# ---------------------------------------------------------------- sign-in, sign-out, home
@router.get("/")
def home(p: PageDep) -> Response:
    if p.caller is None:
        return render(p, "signin.html", errors={})
    return render(p, "home.html")


@router.post("/signin")
async def sign_in(request: Request, p: PageDep) -> Response:
    form = await checked_form(request, p)
    token = _text(form, "token")
    throttle: Throttle = request.app.state.auth_throttle  # the API's own count (issue 14)
    address = request.client.host if request.client else "-"
    try:
        throttle.check(address)
    except TooManyFailures as e:
        why = Shown(e.problem, e.title, e.detail, "wait, then sign in again", "token", 429)
        return render(p, "signin.html", status=429, errors={"token": why})
    if not token or p.backend.views.get(MEMBERS, INDEX, hash_token(token)) is None:
        throttle.fail(address)
        return render(
            p,
            "signin.html",
            status=401,
            errors={
                "token": Shown(
                    "unauthenticated",
                    "A valid member token is required",
                    "that token is not (or no longer) valid",
                    "ask an owner for a new token (`admin add-member`)",
                    "token",
                    401,
                )
            },
        )
    sessions = store(request)
    sessions.drop(p.session.id)
    session = sessions.new(hash_token(token))  # a new id on sign-in: no session fixation
    response = redirect("/")
    set_cookie(request, response, session)
    return response


@router.post("/signout")
async def sign_out(request: Request, p: PageDep) -> Response:
    await checked_form(request, p)
    store(request).drop(p.session.id)
    response = redirect("/")
    response.delete_cookie(COOKIE, path="/")
    return response


# ---------------------------------------------------------------- Settings → Connections
def _connections_page(
    p: Page, errors: dict[str, Shown], dialog: str | None, storage_form: str | None
) -> Response:
    caller = p.me
    views = p.backend.views
    cards = connections_api.connections(caller, views)
    volumes: list[Any] = []
    if (
        storage_form == "volume"
        and p.can("discover_volumes")
        and cards.compute.status == "connected"
    ):
        try:
            volumes = storage_api.volumes(caller, p.backend.services.connections)
        except TensorantError as exc:
            errors.setdefault("storage", shown(exc))
    return render(
        p,
        "connections.html",
        status=status_of(errors),
        compute=cards.compute,
        storage=cards.storage,
        dialog=dialog,
        storage_form=storage_form,
        volumes=volumes,
        errors=errors,
    )


@router.get("/settings/connections")
def connections_page(
    p: SignedIn,
    dialog: Annotated[str | None, Query(max_length=40)] = None,
    storage: Annotated[str | None, Query(max_length=40)] = None,
) -> Response:
    return _connections_page(p, {}, dialog, storage)


@router.post("/settings/connections/runpod")
async def connect_runpod(request: Request, p: SignedIn) -> Response:
    form = await checked_form(request, p)
    caller = p.require("manage_connections")
    errors: dict[str, Shown] = {}
    replace = form.get("action") == "replace"
    api = connections_api.rotate_runpod if replace else connections_api.connect_runpod
    ok = do(
        p,
        errors,
        "api_key",
        lambda: api(
            request,
            ApiKeyIn(api_key=_text(form, "api_key")),
            caller,
            p.backend.services.connections,
            p.settle,
            p.backend.views,
        ),
    )
    if ok:
        return redirect("/settings/connections")
    return _connections_page(p, errors, "replace-key" if replace else "connect-runpod", None)


@router.post("/settings/connections/runpod/disconnect")
async def disconnect_runpod(request: Request, p: SignedIn) -> Response:
    await checked_form(request, p)
    caller = p.require("manage_connections")
    errors: dict[str, Shown] = {}
    if do(
        p,
        errors,
        "disconnect",
        lambda: connections_api.disconnect_runpod(caller, p.backend.services.connections, p.settle),
    ):
        return redirect("/settings/connections")
    return _connections_page(p, errors, None, None)


@router.post("/settings/connections/storage")
async def connect_storage(request: Request, p: SignedIn) -> Response:
    form = await checked_form(request, p)
    caller = p.require("manage_connections")
    errors: dict[str, Shown] = {}
    kind = _text(form, "kind")
    storage_form = _text(form, "form") or ("s3" if kind == "s3" else "volume")

    def bind() -> object:
        body: VolumeStorageIn | S3StorageIn
        if kind == "s3":
            body = S3StorageIn(
                kind="s3",
                endpoint_url=_text(form, "endpoint_url"),
                bucket=_text(form, "bucket"),
                region=_text(form, "region"),
                access_key_id=_text(form, "access_key_id"),
                secret_access_key=_text(form, "secret_access_key"),
            )
        else:
            volume_id, datacenter_id = _text(form, "volume_id"), _text(form, "datacenter_id")
            if "|" in _text(form, "volume"):  # the discovered list: "<id>|<datacenter>"
                volume_id, datacenter_id = _text(form, "volume").split("|", 1)
            body = VolumeStorageIn(
                kind="runpod_volume",
                volume_id=volume_id,
                datacenter_id=datacenter_id,
                access_key_id=_text(form, "access_key_id"),
                secret_access_key=_text(form, "secret_access_key"),
            )
        return storage_api.bind(
            request, body, caller, p.backend.services.storage, p.settle, p.backend.views
        )

    if do(p, errors, "storage", bind):
        return redirect("/settings/connections")
    return _connections_page(p, errors, None, storage_form)


@router.post("/settings/connections/storage/resize")
async def resize_storage(request: Request, p: SignedIn) -> Response:
    form = await checked_form(request, p)
    caller = p.require("manage_connections")
    errors: dict[str, Shown] = {}
    if do(
        p,
        errors,
        "resize",
        lambda: storage_api.resize(
            ResizeIn.model_validate({"size_gb": _count(_text(form, "size_gb"))}),
            caller,
            p.backend.services.storage,
            p.settle,
            p.backend.views,
        ),
    ):
        return redirect("/settings/connections")
    return _connections_page(p, errors, None, None)


# ---------------------------------------------------------------- projects and datasets
@router.get("/projects")
def projects_page(p: SignedIn) -> Response:
    return _projects(p, {})


def _projects(p: Page, errors: dict[str, Shown]) -> Response:
    items = projects_api.list_projects(p.me, p.backend.views)
    return render(p, "projects.html", status=status_of(errors), projects=items, errors=errors)


@router.post("/projects")
async def create_project(request: Request, p: SignedIn) -> Response:
    form = await checked_form(request, p)
    caller = p.require("manage_projects")
    errors: dict[str, Shown] = {}
    made: list[Any] = []
    if do(
        p,
        errors,
        "name",
        lambda: made.append(
            projects_api.create(
                ProjectIn(name=_text(form, "name")),
                caller,
                p.backend.services.projects,
                p.settle,
                p.backend.views,
            )
        ),
    ):
        return redirect(f"/projects/{made[0].id}")
    return _projects(p, errors)


def _project(p: Page, project_id: str, errors: dict[str, Shown]) -> Response:
    views = p.backend.views
    datasets = projects_api.list_datasets(project_id, p.me, views)
    project = projects_api._project(views, p.me.org_id, project_id)
    return render(
        p,
        "project.html",
        status=status_of(errors),
        project=project,
        datasets=datasets,
        errors=errors,
    )


@router.get("/projects/{project_id}")
def project_page(project_id: str, p: SignedIn) -> Response:
    return _project(p, project_id, {})


@router.post("/projects/{project_id}/datasets")
async def add_dataset(project_id: str, request: Request, p: SignedIn) -> Response:
    """Upload a JSONL file (stored, read back and checked by the projects service, as the API's
    multipart upload does) or register an object already on storage (the API's JSON body)."""
    form = await checked_form(request, p)
    caller = p.require("manage_projects")
    errors: dict[str, Shown] = {}
    service = p.backend.services.projects
    file = form.get("file")

    def upload() -> None:
        if not isinstance(file, StarletteUpload) or not file.filename:
            raise DomainError("choose the JSONL file to upload", rule="upload")
        p.settle(
            service.upload_dataset(
                caller.org_id,
                project_id,
                caller.actor,
                name=_text(form, "name"),
                version=_text(form, "version"),
                source=file.file,
                size_bytes=file.size,
            )[1]
        )

    def register() -> None:
        fields = {k: _text(form, k) for k in DatasetVersionIn.model_fields if _text(form, k)}
        body = DatasetVersionIn.model_validate(fields)
        p.settle(
            service.register_dataset(caller.org_id, project_id, caller.actor, **body.model_dump())[
                1
            ]
        )

    key = "register" if form.get("mode") == "register" else "upload"
    if await run_in_threadpool(do, p, errors, key, register if key == "register" else upload):
        return redirect(f"/projects/{project_id}")
    return _project(p, project_id, errors)


# ---------------------------------------------------------------- Tune → Runs
@router.get("/runs")
async def runs_page(request: Request) -> Response:
    return await read_signed_in(request, _runs_page)


def _runs_page(p: Page) -> Response:
    backend = p.backend
    shown = presented_runs(
        backend.views, p.me.org_id, backend.clock.now(), backend.services.trainer
    )
    rows = run_rows(shown, newest_first=True)
    return render_kept(p, "runs.html", rows, rows=rows)


def _gpus(p: Page) -> tuple[list[Any], str | None]:
    storage = connections_api.storage_card(p.backend.views, p.me.org_id)
    datacenter = storage.datacenter_id if storage.kind == "runpod_volume" else None
    try:
        return gpus_api.gpus(p.me, p.backend.services.connections, datacenter), datacenter
    except TensorantError:
        return [], datacenter


def _base_models(p: Page) -> list[str]:
    """What `GET /v1/base-models` lists (the catalogue and the storage's models/<folder>);
    the catalogue alone when the storage cannot be listed just now."""
    try:
        found = base_models_api.base_models(p.me, p.backend.services.base_models)
    except TensorantError:
        return list(BASE_MODELS)
    return [m.id for m in found]


def _configure(p: Page, errors: dict[str, Shown], values: dict[str, Any]) -> Response:
    views = p.backend.views
    datasets = []
    for project in projects_api.list_projects(p.me, views):
        for dv in projects_api.list_datasets(project.id, p.me, views):
            datasets.append((project, dv))
    gpus, datacenter = _gpus(p)
    finished = [
        r
        for r in runs_api.list_runs(p.me, views, p.backend.clock, p.backend.services.trainer)
        if r.state == "succeeded" and r.kind == "trial"
    ]
    return render(
        p,
        "run_new.html",
        status=status_of(errors),
        datasets=datasets,
        gpus=gpus,
        datacenter=datacenter,
        base_models=_base_models(p),
        baselines=finished,
        values=values,
        errors=errors,
    )


DEFAULTS = {
    "kind": "trial",
    "base_model": "Qwen/Qwen2.5-7B-Instruct",
    "gpu_count": "1",
    "price_limit_per_hour": "2.00",
    "max_runtime_minutes": "30",
}


@router.get("/runs/new")
def configure_page(p: SignedIn) -> Response:
    return _configure(p, {}, dict(DEFAULTS))


@router.post("/runs")
async def save_draft(request: Request, p: SignedIn) -> Response:
    form = await checked_form(request, p)
    caller = p.require("manage_runs")
    errors: dict[str, Shown] = {}
    project_id, _, dv_id = _text(form, "dataset").partition("/")
    values = {k: _text(form, k) for k in (*DEFAULTS, "gpu_type_id", "dataset", "baseline")}
    made: list[Any] = []

    def draft() -> None:
        body = RunCreate.model_validate(
            {
                "project_id": project_id,
                "dataset_version_id": dv_id,
                "kind": values["kind"],
                "baseline_run_id": values["baseline"] or None,
                "base_model": values["base_model"],
                "gpu_type_id": values["gpu_type_id"],
                "gpu_count": _count(values["gpu_count"]),
                "price_limit_per_hour": values["price_limit_per_hour"],
                "max_runtime_minutes": _count(values["max_runtime_minutes"]),
            }
        )
        made.append(
            runs_api.create(
                body, caller, p.backend.services.runs, p.settle, p.backend.views, p.backend.clock
            )
        )

    if do(p, errors, "save", draft):
        return redirect(f"/runs/{made[0].id}")
    return _configure(p, errors, values)


def _run(p: Page, run_id: str, errors: dict[str, Shown], confirm: str | None = None) -> Response:
    views, clock = p.backend.views, p.backend.clock
    run = runs_api.get_run(run_id, p.me, views, clock, p.backend.services.trainer)
    history = runs_api.events(run_id, p.me, views, p.backend.services.runs, 0, 500).events
    price = None
    if run.state == "draft" and confirm == "launch":
        gpus, _ = _gpus(p)
        price = next((g.price_per_hour for g in gpus if g.id == run.gpu_type_id), None)
    storage = connections_api.storage_card(views, p.me.org_id)
    return render(
        p,
        "run.html",
        status=status_of(errors),
        run=run,
        history=history,
        confirm=confirm,
        price=price,
        storage=storage,
        terminal=run.state in TERMINAL,
        errors=errors,
    )


@router.get("/runs/{run_id}")
def run_page(
    run_id: str, p: SignedIn, confirm: Annotated[str | None, Query(max_length=20)] = None
) -> Response:
    return _run(p, run_id, {}, confirm)


@router.get("/runs/{run_id}/status")
def run_status(run_id: str, p: SignedIn) -> Response:
    """The progress fragment the run page polls (htmx) until the run ends."""
    run = runs_api.get_run(
        run_id, p.me, p.backend.views, p.backend.clock, p.backend.services.trainer
    )
    return render(p, "_run_status.html", run=run, terminal=run.state in TERMINAL)


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
    return await logs_api.stream(
        request, run_id, p.me, p.backend.views, p.backend.logs, last_event_id, after
    )


@router.post("/runs/{run_id}/{action}")
async def run_action(run_id: str, action: str, request: Request, p: SignedIn) -> Response:
    form = await checked_form(request, p)
    caller = p.require("manage_runs")
    errors: dict[str, Shown] = {}
    b = p.backend
    runs, views = b.services.runs, b.views
    commands = {
        "launch": lambda: runs_api.launch(
            run_id,
            LaunchIn.model_validate(
                {
                    "confirm": form.get("confirm") == "true",
                    "accepted_price_per_hour": _text(form, "accepted_price_per_hour") or None,
                }
            ),
            caller,
            runs,
            p.settle,
            views,
        ),
        "cancel": lambda: runs_api.cancel(run_id, caller, runs, p.settle, views),
        "verify": lambda: runs_api.recover_verify(run_id, caller, runs, p.settle, views),
        "resume": lambda: runs_api.resume(
            run_id,
            ResumeIn(confirm_billing=form.get("confirm_billing") == "true"),
            caller,
            runs,
            p.settle,
            views,
        ),
        "release": lambda: runs_api.release(
            run_id,
            ReleaseIn(confirm_delete_unverified=form.get("confirm_delete_unverified") == "true"),
            caller,
            runs,
            p.settle,
            views,
        ),
        "discard": lambda: runs_api.delete(run_id, caller, runs, p.settle),
        "upload": lambda: runs_api.recover_upload(
            run_id, caller, runs, p.settle, views, _adapter_zip(form)
        ),
    }
    if action not in commands:
        return render(p, "error.html", status=404, message="no such action")
    if do(p, errors, action, commands[action]):
        return redirect("/runs" if action == "discard" else f"/runs/{run_id}")
    return _run(p, run_id, errors, "launch" if action == "launch" else None)


def _adapter_zip(form: dict[str, Any]) -> UploadFile:
    """Verify and recover (custom S3): the adapter.zip retrieved from the Pod."""
    file = form.get("file")
    if not isinstance(file, StarletteUpload) or not file.filename:
        raise DomainError("choose the adapter.zip retrieved from the Pod", rule="upload")
    return file  # type: ignore[return-value]  # the API route reads only .file


# ---------------------------------------------------------------- cleanup, billing, audit
@router.get("/cleanup")
def cleanup_page(p: SignedIn) -> Response:
    status = cleanup_api.cleanup(p.me, p.backend, p.backend.services.trainer)
    return render(p, "cleanup.html", cleanup=status)


@router.get("/billing")
def billing_page(
    p: SignedIn,
    group_by: Annotated[str, Query(max_length=20)] = "run",
) -> Response:
    caller = p.require("billing")
    errors: dict[str, Shown] = {}
    result: list[dict[str, Any]] = []
    do(
        p,
        errors,
        "group_by",
        lambda: result.append(
            billing_api.get_costs(caller, p.backend.views, p.backend.clock, None, None, group_by)
        ),
    )
    return render(
        p,
        "billing.html",
        status=status_of(errors),
        costs=result[0] if result else None,
        group_by=group_by,
        errors=errors,
    )


@router.get("/billing/export")
def billing_export(
    p: SignedIn, format: Annotated[str, Query(max_length=20)] = "focus-csv"
) -> Response:
    caller = p.require("billing")
    return billing_api.get_export(caller, p.backend.views, p.backend.clock, None, None, format)


@router.get("/audit")
def audit_page(
    p: SignedIn,
    verify: Annotated[bool, Query()] = False,
    after: Annotated[int, Query(ge=0)] = 0,
) -> Response:
    caller = p.require("audit")
    views = p.backend.views
    events = audit_api.events(caller, views, p.backend.services.log, after, 100, None, None)
    chain = audit_api.verify_chain(caller, p.backend.services.log, views) if verify else None
    return render(p, "audit.html", events=events, chain=chain)


@router.get("/audit/{aggregate_type}/{aggregate_id}")
def audit_state_page(
    aggregate_type: str,
    aggregate_id: str,
    p: SignedIn,
    as_of: Annotated[str | None, Query(max_length=40)] = None,
) -> Response:
    """U2 in the console: one object as it was at a time (the API's `as_of`), secrets redacted."""
    caller = p.require("audit")
    b = p.backend
    state = audit_api.as_of(
        aggregate_type, aggregate_id, caller, b.services.log, b.views, b.clock, as_of or None
    )
    return render(
        p,
        "audit_state.html",
        aggregate_type=aggregate_type,
        aggregate_id=aggregate_id,
        as_of=as_of or "",
        state=json.dumps(state, indent=2, sort_keys=True, default=str, ensure_ascii=False),
    )


def money(value: str | Decimal | None) -> str:
    return "—" if value is None else f"${Decimal(value):.2f}"
