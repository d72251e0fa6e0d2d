"""Projects and dataset versions (P1)."""

from __future__ import annotations

from typing import BinaryIO

from api.deps import Backend, Caller, settler
from api.schemas.projects import DatasetVersionIn, DatasetVersionPublic, ProjectPublic
from domain.errors import NotFound
from projections.store.base import ViewStore
from projections.views.projects import PROJECTS


def project(*, views: ViewStore, caller: Caller, project_id: str) -> ProjectPublic:
    doc = views.get(PROJECTS, caller.org_id, f"project:{project_id}")
    if doc is None:  # another organization's project looks exactly like a missing one (A4)
        raise NotFound(f"project {project_id} not found")
    return ProjectPublic(**doc)


def projects(*, views: ViewStore, caller: Caller) -> list[ProjectPublic]:
    return [ProjectPublic(**doc) for _, doc in views.list(PROJECTS, caller.org_id, "project:")]


def create(*, backend: Backend, caller: Caller, name: str) -> ProjectPublic:
    """P1: the first project locks the storage location (S5)."""
    project_id, position = backend.services.projects.create(caller.org_id, caller.actor, name)
    settler(backend)(position)
    return project(views=backend.views, caller=caller, project_id=project_id)


def datasets(*, views: ViewStore, caller: Caller, project_id: str) -> list[DatasetVersionPublic]:
    project(views=views, caller=caller, project_id=project_id)
    docs = [doc for _, doc in views.list(PROJECTS, caller.org_id, f"dataset:{project_id}:")]
    docs.sort(key=lambda d: (d["created_at"], d["id"]))  # oldest first, not by random id
    return [DatasetVersionPublic(**doc) for doc in docs]


def _dataset(
    backend: Backend, caller: Caller, project_id: str, dv_id: str, position: int
) -> DatasetVersionPublic:
    settler(backend)(position)
    doc = backend.views.get(PROJECTS, caller.org_id, f"dataset:{project_id}:{dv_id}")
    if doc is None:
        raise NotFound(f"dataset version {dv_id} not found")
    return DatasetVersionPublic(**doc)


def upload_dataset(
    *,
    backend: Backend,
    caller: Caller,
    project_id: str,
    name: str,
    version: str,
    source: BinaryIO,
    size_bytes: int | None,
) -> DatasetVersionPublic:
    """P1: the file is stored, read back, measured and checked row by row; nothing is
    registered on failure. Blocking: an async route runs it in the threadpool."""
    dv_id, position = backend.services.projects.upload_dataset(
        caller.org_id,
        project_id,
        caller.actor,
        name=name,
        version=version,
        source=source,
        size_bytes=size_bytes,
    )
    return _dataset(backend, caller, project_id, dv_id, position)


def register_dataset(
    *, backend: Backend, caller: Caller, project_id: str, body: DatasetVersionIn
) -> DatasetVersionPublic:
    """P1: an object already on storage, read back and checked as an upload is."""
    dv_id, position = backend.services.projects.register_dataset(
        caller.org_id, project_id, caller.actor, **body.model_dump()
    )
    return _dataset(backend, caller, project_id, dv_id, position)
