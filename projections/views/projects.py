"""Projects (`project:<id>`) and their dataset versions (`dataset:<project>:<version id>`) (P1)."""

from __future__ import annotations

from typing import Any

from domain.ids import id_text
from domain.project import (
    DatasetTokensCounted,
    DatasetVersionRegistered,
    ProjectCreated,
    token_count_json,
)
from domain.times import iso
from projections.store.base import INDEX, ViewBatch
from projections.store.engine import topics_of

PROJECTS = "projects"


class ProjectsView:
    name = PROJECTS
    rebuild_weight = 1.0  # see `AuditView.rebuild_weight`
    topics = topics_of(ProjectCreated, DatasetVersionRegistered, DatasetTokensCounted)

    def apply(self, batch: ViewBatch, event: Any, position: int) -> None:
        project_id = id_text(event.originator_id)
        if isinstance(event, ProjectCreated):
            batch.put(
                event.org_id,
                f"project:{project_id}",
                {
                    "id": project_id,
                    "name": event.name,
                    "created_at": iso(event.timestamp),
                    "created_by": event.actor,
                },
            )
            batch.put(INDEX, f"aggregate:{project_id}", {"org_id": event.org_id})
        elif isinstance(event, DatasetVersionRegistered):
            owner = batch.get(INDEX, f"aggregate:{project_id}")
            if owner is None:
                return
            dv = event.dataset_version_id
            batch.put(
                owner["org_id"],
                f"dataset:{project_id}:{dv}",
                {
                    "id": dv,
                    "project_id": project_id,
                    "name": event.name,
                    "version": event.version,
                    "object_key": event.object_key,
                    "size_bytes": event.size_bytes,
                    "row_count": event.row_count,
                    "sha256": event.sha256,
                    "format": event.format,
                    "created_at": iso(event.timestamp),
                },
            )
        elif isinstance(event, DatasetTokensCounted):
            owner = batch.get(INDEX, f"aggregate:{project_id}")
            if owner is None:
                return
            key = f"dataset:{project_id}:{event.dataset_version_id}"
            dataset = batch.get(owner["org_id"], key)
            if dataset is None:
                return
            counts = [
                c for c in dataset.get("token_counts", []) if c["base_model"] != event.base_model
            ]
            counts.append({**token_count_json(event), "counted_at": iso(event.timestamp)})
            batch.put(owner["org_id"], key, {**dataset, "token_counts": counts})
