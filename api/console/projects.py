"""Projects and their dataset versions: create, upload with per-line errors, register (P1)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from starlette.datastructures import UploadFile

from api.actions import projects
from api.console.forms import Errors, status_of, submit, text
from api.console.web import Page, SignedIn, checked_form, pages, redirect, render
from api.schemas.projects import DatasetVersionIn
from domain.errors import DomainError

router = pages()


def _projects(p: Page, errors: Errors, name: str = "") -> Response:
    found = projects.projects(views=p.backend.views, caller=p.me)
    return render(
        p, "projects.html", status=status_of(errors), projects=found, errors=errors, name=name
    )


@router.get("/projects")
def projects_page(p: SignedIn) -> Response:
    return _projects(p, {})


@router.post("/projects")
async def create_project(request: Request, p: SignedIn) -> Response:
    form = await checked_form(request, p)
    caller = p.require("manage_projects")
    errors: Errors = {}
    made: list[Any] = []

    def create() -> None:
        made.append(projects.create(backend=p.backend, caller=caller, name=text(form, "name")))

    if submit(p, errors, "name", create):
        return redirect(f"/projects/{made[0].id}")
    return _projects(p, errors, text(form, "name"))


# The dataset forms' fields, kept after a refusal (a file cannot be: the browser asks again).
KEPT = ("name", "version", "object_key", "sha256")


def _project(
    p: Page, project_id: str, errors: Errors, kept: dict[str, str] | None = None
) -> Response:
    views = p.backend.views
    return render(
        p,
        "project.html",
        status=status_of(errors),
        project=projects.project(views=views, caller=p.me, project_id=project_id),
        datasets=projects.datasets(views=views, caller=p.me, project_id=project_id),
        errors=errors,
        kept=kept or {},
    )


@router.get("/projects/{project_id}")
def project_page(project_id: str, p: SignedIn) -> Response:
    return _project(p, project_id, {})


@router.post("/projects/{project_id}/datasets")
async def add_dataset(project_id: str, request: Request, p: SignedIn) -> Response:
    """Upload a JSONL file (stored, read back and checked, as the API's multipart upload) or
    register an object already on storage (the API's JSON body)."""
    form = await checked_form(request, p)
    caller = p.require("manage_projects")
    errors: Errors = {}
    file = form.get("file")

    def upload() -> None:
        if not isinstance(file, UploadFile) or not file.filename:
            raise DomainError("choose the JSONL file to upload", rule="upload")
        projects.upload_dataset(
            backend=p.backend,
            caller=caller,
            project_id=project_id,
            name=text(form, "name"),
            version=text(form, "version"),
            source=file.file,
            size_bytes=file.size,
        )

    def register() -> None:
        fields = {k: text(form, k) for k in DatasetVersionIn.model_fields if text(form, k)}
        body = DatasetVersionIn.model_validate(fields)
        projects.register_dataset(
            backend=p.backend, caller=caller, project_id=project_id, body=body
        )

    key = "register" if form.get("mode") == "register" else "upload"
    if await run_in_threadpool(submit, p, errors, key, register if key == "register" else upload):
        return redirect(f"/projects/{project_id}")
    return _project(p, project_id, errors, {"form": key, **{k: text(form, k) for k in KEPT}})
