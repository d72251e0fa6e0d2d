"""Projects and dataset versions (P1)."""

from __future__ import annotations

from fastapi import APIRouter, Request, status
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.formparsers import MultiPartException

from api.actions import projects
from api.deps import BackendDep, ProjectManager, ProjectsDep, Reader, ViewsDep
from api.schemas.common import AUTHENTICATED, problem_responses
from api.schemas.projects import (
    DatasetUploadIn,
    DatasetUploadPublic,
    DatasetVersionIn,
    DatasetVersionPublic,
    ProjectIn,
    ProjectPublic,
)
from domain.project import DatasetTooLarge

router = APIRouter(prefix="/v1/projects", tags=["projects"], responses=AUTHENTICATED)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ProjectPublic)
def create(body: ProjectIn, caller: ProjectManager, backend: BackendDep) -> ProjectPublic:
    """P1: the first project locks the storage location (S5)."""
    return projects.create(backend=backend, caller=caller, name=body.name)


@router.get("", response_model=list[ProjectPublic])
def list_projects(caller: Reader, views: ViewsDep) -> list[ProjectPublic]:
    return projects.projects(views=views, caller=caller)


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
    try:
        form = await request.form(max_files=1, max_fields=4)
    except (MultiPartException, StarletteHTTPException) as e:  # Starlette wraps the former
        why = getattr(e, "detail", None) or getattr(e, "message", "")
        raise _invalid("file", f"not a multipart body of name, version and file: {why}") from None
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
    responses=problem_responses(413),
)
async def register_dataset(
    project_id: str, request: Request, caller: ProjectManager, backend: BackendDep
) -> DatasetVersionPublic:
    """P1: JSON registers an object already on storage; multipart (`name`, `version`, `file`)
    uploads it first. Either way the server reads the object back, computes size, sha256 and
    row count, and checks every row; nothing is registered on failure."""
    if request.headers.get("content-type", "").startswith("multipart/form-data"):
        limit = backend.services.projects.max_dataset_bytes
        name, version, file = await _multipart(request, limit)
        try:
            return await run_in_threadpool(
                lambda: projects.upload_dataset(
                    backend=backend,
                    caller=caller,
                    project_id=project_id,
                    name=name,
                    version=version,
                    source=file.file,
                    size_bytes=file.size,
                )
            )
        finally:
            await file.close()
    try:
        body = DatasetVersionIn.model_validate_json(await request.body())
    except ValidationError as e:
        raise RequestValidationError(e.errors(include_url=False)) from None
    return await run_in_threadpool(
        lambda: projects.register_dataset(
            backend=backend, caller=caller, project_id=project_id, body=body
        )
    )


@router.post(
    "/{project_id}/datasets/uploads",
    status_code=status.HTTP_201_CREATED,
    response_model=DatasetUploadPublic,
    responses=problem_responses(413),
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
    return projects.datasets(views=views, caller=caller, project_id=project_id)
