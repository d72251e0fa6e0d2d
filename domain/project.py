"""Projects and their dataset versions (P1)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from domain.base import TensorantAggregate, topic
from domain.errors import Conflict, DomainError

_SHA256 = re.compile(r"[0-9a-f]{64}")
DATASET_FORMATS = ("chat", "prompt_completion")


# P1: a full run learns from at least this many rows (OpenAI's minimum); a trial may use fewer.
MIN_FULL_RUN_ROWS = 10


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

    def ensure_new_dataset_version(self, name: str, version: str, object_key: str) -> str:
        """Refuse before any storage is read: names, a safe key, a version not yet registered;
        returns the key, stripped."""
        if not name.strip() or not version.strip():
            raise InvalidDataset("a dataset version needs a name and a version")
        key = object_key.strip()
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise InvalidDataset("object_key must be a relative path inside the storage bucket")
        if any(d["name"] == name and d["version"] == version for d in self.datasets.values()):
            raise DatasetVersionExists(f"{name} version {version} is already registered")
        return key

    def ensure_enough_rows(self, dataset_version_id: str, kind: str) -> None:
        """P1: a full run learns from at least MIN_FULL_RUN_ROWS rows (OpenAI's minimum); a
        trial may check a smaller sample first."""
        rows = int(self.datasets[dataset_version_id]["row_count"])
        if kind == "full" and rows < MIN_FULL_RUN_ROWS:
            raise DatasetTooSmall(
                f"a full run needs at least {MIN_FULL_RUN_ROWS} valid rows; this dataset "
                f"version has {rows}",
                rule="dataset_rows",
                row_count=rows,
                minimum=MIN_FULL_RUN_ROWS,
            )

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
        format: str = "chat",
    ) -> None:
        key = self.ensure_new_dataset_version(name, version, object_key)
        if size_bytes <= 0:
            raise InvalidDataset("size_bytes must be positive")
        if row_count < 0:
            raise InvalidDataset("row_count cannot be negative")
        if not _SHA256.fullmatch(sha256):
            raise InvalidDataset("sha256 must be 64 lower-case hexadecimal characters")
        if format not in DATASET_FORMATS:
            raise InvalidDataset(f"format must be one of {', '.join(DATASET_FORMATS)}")
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
            format=format,
        )

    def token_count_needed(
        self, dataset_version_id: str, base_model: str, max_seq_len: int
    ) -> bool:
        """P1: a dataset version's token counts are cached per base model (and the sequence
        length they were cut at); a draft with the same pair counts nothing again."""
        dataset = self.datasets.get(dataset_version_id)
        if dataset is None:
            return False
        known = dataset.get("token_counts", {}).get(base_model)
        return known is None or known.get("max_seq_len") != max_seq_len

    def record_token_count(
        self,
        dataset_version_id: str,
        base_model: str,
        max_seq_len: int,
        counts: dict[str, int] | None,
        unavailable: str | None,
        actor: str,
        at: datetime,
    ) -> bool:
        """P1: the dataset's tokens as `base_model`'s tokenizer counts them (the trainer's own
        encoder), or why they could not be counted. False when already recorded (a repeat)."""
        if not self.token_count_needed(dataset_version_id, base_model, max_seq_len):
            return False
        self._trigger(
            DatasetTokensCounted,
            actor,
            at,
            dataset_version_id=dataset_version_id,
            base_model=base_model,
            max_seq_len=max_seq_len,
            tokens=None if counts is None else int(counts["tokens"]),
            trained_tokens=None if counts is None else int(counts["trained_tokens"]),
            examples=None if counts is None else int(counts["examples"]),
            unavailable=unavailable if counts is None else None,
        )
        return True


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
    format: str = "chat"  # recorded since P1's checks; older events were chat datasets

    def apply(self, aggregate: Project) -> None:
        aggregate.datasets[self.dataset_version_id] = {
            "name": self.name,
            "version": self.version,
            "object_key": self.object_key,
            "size_bytes": self.size_bytes,
            "row_count": self.row_count,
            "sha256": self.sha256,
            "format": self.format,
        }


@topic("tensorant.DatasetTokensCounted")
class DatasetTokensCounted(Project.Event):
    dataset_version_id: str
    base_model: str
    max_seq_len: int
    tokens: int | None
    trained_tokens: int | None
    examples: int | None
    unavailable: str | None  # why the tokens could not be counted (no tokenizer, say)

    def apply(self, aggregate: Project) -> None:
        dataset = aggregate.datasets[self.dataset_version_id]
        dataset.setdefault("token_counts", {})[self.base_model] = token_count_json(self)


def token_count_json(event: DatasetTokensCounted) -> dict[str, Any]:
    """How a token count is shown (the aggregate and the projects view keep the same)."""
    return {
        "base_model": event.base_model,
        "max_seq_len": event.max_seq_len,
        "status": "unavailable" if event.unavailable is not None else "counted",
        "tokens": event.tokens,
        "trained_tokens": event.trained_tokens,
        "examples": event.examples,
        "unavailable": event.unavailable,
    }


class InvalidProject(DomainError):
    problem = "invalid-project"


class InvalidDataset(DomainError):
    problem = "invalid-dataset"


class DatasetVersionExists(Conflict):
    problem = "dataset-version-exists"


class DatasetInvalid(DomainError):
    """Rows that break P1's rules; `errors` lists the first 20 with their line numbers."""

    problem = "dataset-invalid"
    title = "The dataset has invalid rows"


class DatasetTooSmall(DomainError):
    problem = "dataset-too-small"
    title = "Too few rows for a full run"


class DatasetNotFound(DomainError):
    problem = "dataset-not-found"
    title = "No such object in the organization's storage"


class DatasetSha256Mismatch(DomainError):
    problem = "dataset-sha256-mismatch"
    title = "The object's sha256 differs from the one sent"


class DatasetTooLarge(DomainError):
    problem = "dataset-too-large"
    status = 413
    title = "The dataset is larger than this server accepts"


class DatasetChanged(Conflict):
    problem = "dataset-changed"
    title = "The dataset object changed after it was registered"
