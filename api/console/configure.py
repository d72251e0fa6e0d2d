"""Tune → Runs → Configure a run: the form, Save trial draft, and the same form to edit a draft
(R1–R3)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.responses import Response

from api.actions import catalogue, connections, projects, runs
from api.console.forms import Errors, count, status_of, submit, text
from api.console.web import Page, SignedIn, checked_form, pages, redirect, render
from api.schemas.gpus import GpuPublic
from api.schemas.runs import RunCreate, RunPublic
from domain.errors import TensorantError
from domain.gpus import BASE_MODELS
from domain.hyperparameters import HYPERPARAMETERS

router = pages()

DEFAULTS = {
    "kind": "trial",
    "base_model": "Qwen/Qwen2.5-7B-Instruct",
    "gpu_count": "1",
    "price_limit_per_hour": "2.00",
    "max_runtime_minutes": "30",
}


def gpus(p: Page, base_model: str | None = None) -> tuple[list[GpuPublic], str | None]:
    """The GPUs offered now, in the bound volume's datacenter when there is one, judged for the
    form's base model too (memory); none when RunPod cannot be asked just now."""
    card = connections.storage_card(views=p.backend.views, org_id=p.me.org_id)
    datacenter = card.datacenter_id if card.kind == "runpod_volume" else None
    for model in (base_model, None) if base_model else (None,):
        try:
            offers = catalogue.gpus(
                backend=p.backend, caller=p.me, datacenter_id=datacenter, base_model=model
            )
        except TensorantError:
            continue  # a base model that cannot be judged: the offers without it
        return offers, datacenter
    return [], datacenter


def _base_models(p: Page) -> list[str]:
    """What `GET /v1/base-models` lists (the catalogue and the storage's models/<folder>);
    the catalogue alone when the storage cannot be listed just now."""
    try:
        found = catalogue.base_models(backend=p.backend, caller=p.me)
    except TensorantError:
        return list(BASE_MODELS)
    return [m.id for m in found]


def _choices(p: Page, base_model: str | None = None) -> dict[str, Any]:
    """What the form offers: dataset versions, GPUs, base models and finished trials."""
    views = p.backend.views
    datasets = []
    for project in projects.projects(views=views, caller=p.me):
        for dv in projects.datasets(views=views, caller=p.me, project_id=project.id):
            datasets.append((project, dv))
    offers, datacenter = gpus(p, base_model)
    trials = [
        r
        for r in runs.runs(backend=p.backend, caller=p.me)
        if r.state == "succeeded" and r.kind == "trial"
    ]
    return {"datasets": datasets, "gpus": offers, "datacenter": datacenter, "baselines": trials}


def _configure(
    p: Page, errors: Errors, values: dict[str, Any], editing: RunPublic | None = None
) -> Response:
    context = {
        **_choices(p, values.get("base_model")),
        "hyperparameters": HYPERPARAMETERS,
        "base_models": _base_models(p),
        "values": values,
        "errors": errors,
    }
    return render(p, "run_new.html", status=status_of(errors), editing=editing, **context)


def _values(form: dict[str, Any]) -> dict[str, str]:
    names = (*DEFAULTS, "gpu_type_id", "dataset", "baseline", *HYPERPARAMETERS)
    return {k: text(form, k) for k in names}


def _defaults(p: Page, base_model: str) -> dict[str, Any]:
    """R16: the base model's default hyperparameters (none when they cannot be read now)."""
    try:
        return runs.default_hyperparameters(backend=p.backend, caller=p.me, base_model=base_model)
    except TensorantError:
        return {}


def _shown(values: dict[str, Any]) -> dict[str, str]:
    """Hyperparameters as the form's fields show them."""
    return {name: str(values[name]) for name in HYPERPARAMETERS if name in values}


def _number(name: str, value: str) -> int | float | str:
    """A field's text as the number the API's body carries (else the text, which the API's
    schema then refuses with its own words, naming the field)."""
    try:
        number = float(value)
    except ValueError:
        return value
    if HYPERPARAMETERS[name].kind is int:
        return int(number) if number.is_integer() else value
    return number


def _chosen(values: dict[str, str], defaults: dict[str, Any]) -> dict[str, Any]:
    """The Advanced fields a member changed: a field left at the base model's default stays a
    default (it follows the base model when that changes)."""
    chosen: dict[str, Any] = {}
    for name in HYPERPARAMETERS:
        raw = values.get(name, "")
        if not raw:
            continue
        number = _number(name, raw)
        if number != defaults.get(name):
            chosen[name] = number
    return chosen


def _body(values: dict[str, str], defaults: dict[str, Any] | None = None) -> RunCreate:
    """The form's values as the API's body (`POST /v1/runs`, `PATCH /v1/runs/{id}`)."""
    project_id, _, dv_id = values["dataset"].partition("/")
    return RunCreate.model_validate(
        {
            "project_id": project_id,
            "dataset_version_id": dv_id,
            "kind": values["kind"],
            "baseline_run_id": values["baseline"] or None,
            "base_model": values["base_model"],
            "gpu_type_id": values["gpu_type_id"],
            "gpu_count": count(values["gpu_count"]),
            "price_limit_per_hour": values["price_limit_per_hour"],
            "max_runtime_minutes": count(values["max_runtime_minutes"]),
            **_chosen(values, defaults or {}),
        }
    )


@router.get("/runs/new")
def configure_page(p: SignedIn) -> Response:
    values = {**DEFAULTS, **_shown(_defaults(p, DEFAULTS["base_model"]))}
    return _configure(p, {}, values)


@router.post("/runs")
async def save_draft(request: Request, p: SignedIn) -> Response:
    form = await checked_form(request, p)
    caller = p.require("manage_runs")
    errors: Errors = {}
    values = _values(form)
    made: list[Any] = []

    def draft() -> None:
        body = _body(values, _defaults(p, values["base_model"]))
        made.append(runs.create(backend=p.backend, caller=caller, body=body))

    if submit(p, errors, "save", draft):
        return redirect(f"/runs/{made[0].id}")
    return _configure(p, errors, values)


@router.get("/runs/{run_id}/edit")
def edit_page(run_id: str, p: SignedIn) -> Response:
    """The draft's own values in the form (a too-low price limit is fixed, not started over)."""
    run = runs.run(backend=p.backend, caller=p.me, run_id=run_id)
    values = {
        "kind": run.kind,
        "base_model": run.base_model,
        "gpu_count": str(run.gpu_count),
        "price_limit_per_hour": run.price_limit_per_hour,
        "max_runtime_minutes": str(run.max_runtime_minutes),
        "gpu_type_id": run.gpu_type_id,
        "dataset": f"{run.project_id}/{run.dataset_version_id}",
        "baseline": run.baseline_run_id or "",
        **_shown(run.hyperparameters or _defaults(p, run.base_model)),
    }
    return _configure(p, {}, values, run)


@router.post("/runs/{run_id}/edit")
async def save_edit(run_id: str, request: Request, p: SignedIn) -> Response:
    form = await checked_form(request, p)
    caller = p.require("manage_runs")
    errors: Errors = {}
    values = _values(form)

    def update() -> None:
        body = _body(values, _defaults(p, values["base_model"]))
        runs.update(backend=p.backend, caller=caller, run_id=run_id, body=body)

    if submit(p, errors, "save", update):
        return redirect(f"/runs/{run_id}")
    return _configure(p, errors, values, runs.run(backend=p.backend, caller=p.me, run_id=run_id))
