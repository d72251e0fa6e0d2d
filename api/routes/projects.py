"""Projects and dataset versions (P1)."""

from __future__ import annotations

from fastapi import APIRouter, status

from api.deps import ProjectManager, ProjectsDep, Reader, SettleDep, ViewsDep
from api.schemas.common import AUTHENTICATED
from api.schemas.projects import (
    DatasetVersionIn,
    DatasetVersionPublic,
    ProjectIn,
    ProjectPublic,
)
from domain.errors import NotFound
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


@router.post(
    "/{project_id}/datasets",
    status_code=status.HTTP_201_CREATED,
    response_model=DatasetVersionPublic,
)
def register_dataset(
    project_id: str,
    body: DatasetVersionIn,
    caller: ProjectManager,
    service: ProjectsDep,
    settle: SettleDep,
    views: ViewsDep,
) -> DatasetVersionPublic:
    dv_id, position = service.register_dataset_version(
        caller.org_id, project_id, caller.actor, **body.model_dump()
    )
    settle(position)
    doc = views.get(PROJECTS, caller.org_id, f"dataset:{project_id}:{dv_id}")
    if doc is None:
        raise NotFound(f"dataset version {dv_id} not found")
    return DatasetVersionPublic(**doc)


@router.get("/{project_id}/datasets", response_model=list[DatasetVersionPublic])
def list_datasets(project_id: str, caller: Reader, views: ViewsDep) -> list[DatasetVersionPublic]:
    _project(views, caller.org_id, project_id)
    return [
        DatasetVersionPublic(**doc)
        for _, doc in views.list(PROJECTS, caller.org_id, f"dataset:{project_id}:")
    ]
