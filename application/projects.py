"""Projects and dataset versions (P1): the first project locks the storage location (S5)."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import uuid4

from application.conflicts import retry_on_conflict
from application.log import TensorantLog
from application.ports import Clock
from domain.project import Project


@dataclass(frozen=True)
class ProjectService:
    log: TensorantLog
    clock: Clock

    @retry_on_conflict
    def create(self, org_id: str, actor: str, name: str) -> tuple[str, int]:
        """The project and the storage lock, saved together; returns (id, position)."""
        st = self.log.storage(org_id)
        st.ensure_connected()
        at = self.clock.now()
        project = Project.create(org_id, name, actor, at)
        st.lock(str(project.id), actor, at)
        return str(project.id), self.log.save_all(project, st)

    @retry_on_conflict
    def register_dataset_version(
        self,
        org_id: str,
        project_id: str,
        actor: str,
        *,
        name: str,
        version: str,
        object_key: str,
        size_bytes: int,
        row_count: int,
        sha256: str,
    ) -> tuple[str, int]:
        project = self.log.project(org_id, project_id)
        dv_id = str(uuid4())
        project.register_dataset_version(
            dv_id,
            name=name,
            version=version,
            object_key=object_key,
            size_bytes=size_bytes,
            row_count=row_count,
            sha256=sha256,
            actor=actor,
            at=self.clock.now(),
        )
        return dv_id, self.log.save_all(project)
