"""Projects and dataset versions (P1)."""

from __future__ import annotations

from fastapi import APIRouter, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.datastructures import UploadFile

from api.deps import ProjectManager, ProjectsDep, Reader, SettleDep, ViewsDep
from api.schemas.common import AUTHENTICATED
from api.schemas.projects import (
    DatasetUploadIn,
    DatasetUploadPublic,
    DatasetVersionIn,
    DatasetVersionPublic,
    ProjectIn,
    ProjectPublic,
)
from domain.errors import NotFound
from domain.project import DatasetTooLarge
from projections.store.base import ViewStore
from projections.views.projects import PROJECTS

router = APIRouter(prefix="/v1/projects", tags=["projects"], responses=AUTHENTICATED)


def _project(views: ViewStore, org_id: str, project_id: str) -> ProjectPublic:
    doc = views.get(PROJECTS, org_id, f"project:{project_id}")
    if doc is None:  # another organization's project looks exactly like a missing one (A4)
        raise NotFound(f"project {project_id} not found")
    return ProjectPublic(**doc)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ProjectPublic)
def create(
    body: ProjectIn,
    caller: ProjectManager,
    service: ProjectsDep,
    settle: SettleDep,
    views: ViewsDep,
) -> ProjectPublic:
    """P1: the first project locks the storage location (S5)."""
    project_id, position = service.create(caller.org_id, caller.actor, body.name)
    settle(position)
    return _project(views, caller.org_id, project_id)


@router.get("", response_model=list[ProjectPublic])
def list_projects(caller: Reader, views: ViewsDep) -> list[ProjectPublic]:
    return [ProjectPublic(**doc) for _, doc in views.list(PROJECTS, caller.org_id, "project:")]


_MULTIPART_FIELDS = {
    "type": "object",
    "required": ["name", "version", "file"],
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 200},
        "version": {"type": "string", "minLength": 1, "maxLength": 100},
        "file": {"type": "string", "format": "binary", "description": "the JSONL file"},
    },
}
_REGISTER_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {"schema": DatasetVersionIn.model_json_schema()},
            "multipart/form-data": {"schema": _MULTIPART_FIELDS},
        },
    }
}


def _invalid(field: str, message: str) -> RequestValidationError:
    return RequestValidationError([{"loc": ("body", field), "msg": message, "type": "value_error"}])


async def _multipart(request: Request, limit: int) -> tuple[str, str, UploadFile]:
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit + 64 * 1024:
        raise DatasetTooLarge(f"{length} bytes sent; this server accepts {limit}")
    form = await request.form(max_files=1, max_fields=4)
    file, name, version = form.get("file"), form.get("name"), form.get("version")
    if not isinstance(file, UploadFile):
        raise _invalid("file", "a file field with the JSONL dataset is required")
    for field, value, most in (("name", name, 200), ("version", version, 100)):
        if not isinstance(value, str) or not 1 <= len(value.strip()) <= most:
            raise _invalid(field, f"{field} must be text of 1 to {most} characters")
    if file.size is not None and file.size > limit:
        raise DatasetTooLarge(f"{file.size} bytes; this server accepts {limit}")
    return str(name), str(version), file


@router.post(
    "/{project_id}/datasets",
    status_code=status.HTTP_201_CREATED,
    response_model=DatasetVersionPublic,
    openapi_extra=_REGISTER_BODY,
)
async def register_dataset(
    project_id: str,
    request: Request,
    caller: ProjectManager,
    service: ProjectsDep,
    settle: SettleDep,
    views: ViewsDep,
) -> DatasetVersionPublic:
    """P1: JSON registers an object already on storage; multipart (`name`, `version`, `file`)
    uploads it first. Either way the server reads the object back, computes size, sha256 and
    row count, and checks every row; nothing is registered on failure."""
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        name, version, file = await _multipart(request, service.max_dataset_bytes)
        try:
            dv_id, position = await run_in_threadpool(
                lambda: service.upload_dataset(
                    caller.org_id,
                    project_id,
                    caller.actor,
                    name=name,
                    version=version,
                    source=file.file,
                    size_bytes=file.size,
                )
            )
        finally:
            await file.close()
    else:
        try:
            body = DatasetVersionIn.model_validate_json(await request.body())
        except ValidationError as e:
            raise RequestValidationError(e.errors(include_url=False)) from None
        dv_id, position = await run_in_threadpool(
            lambda: service.register_dataset(
                caller.org_id, project_id, caller.actor, **body.model_dump()
            )
        )
    await run_in_threadpool(settle, position)
    doc = views.get(PROJECTS, caller.org_id, f"dataset:{project_id}:{dv_id}")
    if doc is None:
        raise NotFound(f"dataset version {dv_id} not found")
    return DatasetVersionPublic(**doc)


@router.post(
    "/{project_id}/datasets/uploads",
    status_code=status.HTTP_201_CREATED,
    response_model=DatasetUploadPublic,
)
def presign_dataset_upload(
    project_id: str, body: DatasetUploadIn, caller: ProjectManager, service: ProjectsDep
) -> DatasetUploadPublic:
    """P1: a presigned PUT for a big file (custom S3); then register its `object_key`."""
    return DatasetUploadPublic(
        **service.presign_dataset_upload(
            caller.org_id,
            project_id,
            name=body.name,
            version=body.version,
            size_bytes=body.size_bytes,
        )
    )


@router.get("/{project_id}/datasets", response_model=list[DatasetVersionPublic])
def list_datasets(project_id: str, caller: Reader, views: ViewsDep) -> list[DatasetVersionPublic]:
    _project(views, caller.org_id, project_id)
    return [
        DatasetVersionPublic(**doc)
        for _, doc in views.list(PROJECTS, caller.org_id, f"dataset:{project_id}:")
    ]
