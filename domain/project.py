"""Projects and their dataset versions (P1)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from domain.base import TensorantAggregate, topic
from domain.errors import Conflict, DomainError

_SHA256 = re.compile(r"[0-9a-f]{64}")


class Project(TensorantAggregate):
    TOPIC = "tensorant.Project"

    class Event(TensorantAggregate.Event):
        TOPIC = "tensorant.Project.Event"

    class Created(Event, TensorantAggregate.Created):
        TOPIC = "tensorant.Project.Created"

    def __init__(self) -> None:
        """State is set by the created event's apply(); annotations below only document it."""

    org_id: str
    name: str
    datasets: dict[str, dict[str, Any]]

    @classmethod
    def create(cls, org_id: str, name: str, actor: str, at: datetime) -> Project:
        name = name.strip()
        if not name or len(name) > 200:
            raise InvalidProject("a project needs a name of 1 to 200 characters")
        return cls._create(ProjectCreated, actor=actor, timestamp=at, org_id=org_id, name=name)

    def register_dataset_version(
        self,
        dataset_version_id: str,
        name: str,
        version: str,
        object_key: str,
        size_bytes: int,
        row_count: int,
        sha256: str,
        actor: str,
        at: datetime,
    ) -> None:
        if not name.strip() or not version.strip():
            raise InvalidDataset("a dataset version needs a name and a version")
        key = object_key.strip()
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise InvalidDataset("object_key must be a relative path inside the storage bucket")
        if size_bytes <= 0:
            raise InvalidDataset("size_bytes must be positive")
        if row_count < 0:
            raise InvalidDataset("row_count cannot be negative")
        if not _SHA256.fullmatch(sha256):
            raise InvalidDataset("sha256 must be 64 lower-case hexadecimal characters")
        if any(d["name"] == name and d["version"] == version for d in self.datasets.values()):
            raise DatasetVersionExists(f"{name} version {version} is already registered")
        self._trigger(
            DatasetVersionRegistered,
            actor,
            at,
            dataset_version_id=dataset_version_id,
            name=name,
            version=version,
            object_key=key,
            size_bytes=size_bytes,
            row_count=row_count,
            sha256=sha256,
        )


@topic("tensorant.ProjectCreated")
class ProjectCreated(Project.Created):
    org_id: str
    name: str

    def apply(self, aggregate: Project) -> None:
        aggregate.org_id, aggregate.name = self.org_id, self.name
        aggregate.datasets = {}


@topic("tensorant.DatasetVersionRegistered")
class DatasetVersionRegistered(Project.Event):
    dataset_version_id: str
    name: str
    version: str
    object_key: str
    size_bytes: int
    row_count: int
    sha256: str

    def apply(self, aggregate: Project) -> None:
        aggregate.datasets[self.dataset_version_id] = {
            "name": self.name,
            "version": self.version,
            "object_key": self.object_key,
            "size_bytes": self.size_bytes,
            "row_count": self.row_count,
            "sha256": self.sha256,
        }


class InvalidProject(DomainError):
    problem = "invalid-project"


class InvalidDataset(DomainError):
    problem = "invalid-dataset"


class DatasetVersionExists(Conflict):
    problem = "dataset-version-exists"
