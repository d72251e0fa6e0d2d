"""Projects and dataset versions (P1): the first project locks the storage location (S5).

A dataset version is registered only after the server read its object back from the
organization's storage: size, sha256 and row count are computed here, every row is checked with
the trainer's own rules (`trainer.protocol.check_dataset`), and nothing is saved on failure.
"""

from __future__ import annotations

import hashlib
import re
import tempfile
from dataclasses import dataclass
from datetime import timedelta
from typing import BinaryIO, cast
from uuid import uuid4

from application.conflicts import retry_on_conflict
from application.log import TensorantLog
from application.ports import Clock, ObjectStore, S3Credentials, StorageLocation
from application.storage import StorageService
from domain.project import (
    DatasetChanged,
    DatasetInvalid,
    DatasetNotFound,
    DatasetSha256Mismatch,
    DatasetTooLarge,
    Project,
)
from domain.times import iso
from trainer.protocol import DatasetCheck, check_dataset, read_chunks

SPOOL_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_DATASET_BYTES = 1024**3
UPLOAD_URL_SECONDS = 3600
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _spool() -> BinaryIO:
    return cast(BinaryIO, tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES))


def _segment(text: str) -> str:
    return _UNSAFE.sub("-", text.strip()).strip(".-")[:100] or "dataset"


def dataset_prefix(project_id: str) -> str:
    """Where a project's dataset objects live: registration accepts keys under it only."""
    return f"datasets/{project_id}/"


def dataset_key(project_id: str, name: str, version: str) -> str:
    """Where an uploaded dataset version is stored: one object per (project, name, version)."""
    return f"{dataset_prefix(project_id)}{_segment(name)}/{_segment(version)}.jsonl"


def check_stored_dataset(
    objects: ObjectStore, location: StorageLocation, creds: S3Credentials, key: str
) -> DatasetCheck:
    """Read the object back in chunks and check every row; DatasetNotFound when absent."""
    with _spool() as f:
        if not objects.download(location, creds, key, f):
            raise DatasetNotFound(f"no object {key!r} in the organization's storage")
        f.seek(0)
        return check_dataset(read_chunks(f))


def stored_sha256(
    objects: ObjectStore, location: StorageLocation, creds: S3Credentials, key: str
) -> str | None:
    """The object's sha256, computed from its bytes; None when it is gone."""
    digest = hashlib.sha256()
    with _spool() as f:
        if not objects.download(location, creds, key, f):
            return None
        f.seek(0)
        for chunk in read_chunks(f, 1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def refuse_invalid(check: DatasetCheck) -> None:
    if check.ok:
        return
    first = check.problems[0]
    where = f"line {first.line}: " if first.line else ""
    raise DatasetInvalid(
        f"{check.problem_count} problem(s); the first: {where}{first.problem}",
        errors=[p.to_json() for p in check.problems],
        problem_count=check.problem_count,
    )


@dataclass(frozen=True)
class ProjectService:
    log: TensorantLog
    clock: Clock
    objects: ObjectStore
    storage: StorageService
    max_dataset_bytes: int = DEFAULT_MAX_DATASET_BYTES

    @retry_on_conflict
    def create(self, org_id: str, actor: str, name: str) -> tuple[str, int]:
        """The project and the storage lock, saved together; returns (id, position)."""
        st = self.log.storage(org_id)
        st.ensure_connected()
        at = self.clock.now()
        project = Project.create(org_id, name, actor, at)
        st.lock(str(project.id), actor, at)
        return str(project.id), self.log.save_all(project, st)

    # ------------------------------------------------------------ datasets (P1)
    def _too_large(self, size: int) -> DatasetTooLarge:
        return DatasetTooLarge(f"{size} bytes; this server accepts {self.max_dataset_bytes}")

    def _new_version_key(
        self, org_id: str, project_id: str, name: str, version: str, size_bytes: int | None
    ) -> str:
        """Where a new dataset version's object goes, once its size and name are acceptable."""
        if size_bytes is not None and size_bytes > self.max_dataset_bytes:
            raise self._too_large(size_bytes)
        project = self.log.project(org_id, project_id)
        return project.ensure_new_dataset_version(
            name, version, dataset_key(project_id, name, version)
        )

    def upload_dataset(
        self,
        org_id: str,
        project_id: str,
        actor: str,
        *,
        name: str,
        version: str,
        source: BinaryIO,
        size_bytes: int | None = None,
    ) -> tuple[str, int]:
        """Multipart upload: checked as it arrived (nothing is written when a row is bad), then
        streamed to the organization's storage and registered after reading it back."""
        key = self._new_version_key(org_id, project_id, name, version, size_bytes)
        source.seek(0)
        refuse_invalid(check_dataset(read_chunks(source)))
        source.seek(0)
        loc, creds = self.storage.location(org_id)
        self.objects.upload(loc, creds, key, source)
        return self.register_dataset(
            org_id, project_id, actor, name=name, version=version, object_key=key
        )

    def presign_dataset_upload(
        self, org_id: str, project_id: str, *, name: str, version: str, size_bytes: int
    ) -> dict[str, str]:
        """A presigned PUT for a big file (custom S3); register the object afterwards."""
        key = self._new_version_key(org_id, project_id, name, version, size_bytes)
        loc, creds = self.storage.location(org_id)
        url = self.objects.presign_put(loc, creds, key, UPLOAD_URL_SECONDS)
        expires = self.clock.now() + timedelta(seconds=UPLOAD_URL_SECONDS)
        return {"upload_url": url, "object_key": key, "expires_at": iso(expires)}

    def register_dataset(
        self,
        org_id: str,
        project_id: str,
        actor: str,
        *,
        name: str,
        version: str,
        object_key: str,
        sha256: str | None = None,
    ) -> tuple[str, int]:
        """P1: read the object back, compute its numbers, check every row; register only then."""
        project = self.log.project(org_id, project_id)
        key = project.ensure_new_dataset_version(name, version, object_key)
        # Only the project's own dataset objects: never a manifest, an adapter or another
        # project's file; a key outside and a missing object get the one refusal, so the
        # answer never tells whether some other object exists.
        prefix = dataset_prefix(project_id)
        missing = DatasetNotFound(f"no dataset object {key!r} under {prefix} in storage")
        if not key.startswith(prefix) or "//" in key or "/./" in key:
            raise missing
        loc, creds = self.storage.location(org_id)
        info = self.objects.head(loc, creds, key)
        if info is None:
            raise missing
        if info.size > self.max_dataset_bytes:
            raise DatasetTooLarge(
                f"{info.size} bytes; this server accepts {self.max_dataset_bytes}"
            )
        check = check_stored_dataset(self.objects, loc, creds, key)
        if sha256 is not None and sha256.lower() != check.sha256:
            raise DatasetSha256Mismatch(f"the object's sha256 is {check.sha256}, not {sha256}")
        refuse_invalid(check)
        return self._save_registration(org_id, project_id, actor, name, version, key, check)

    @retry_on_conflict
    def _save_registration(
        self,
        org_id: str,
        project_id: str,
        actor: str,
        name: str,
        version: str,
        key: str,
        check: DatasetCheck,
    ) -> tuple[str, int]:
        project = self.log.project(org_id, project_id)
        dv_id = str(uuid4())
        project.register_dataset_version(
            dv_id,
            name=name,
            version=version,
            object_key=key,
            size_bytes=check.size_bytes,
            row_count=check.row_count,
            sha256=check.sha256,
            actor=actor,
            at=self.clock.now(),
            format=check.format or "chat",
        )
        return dv_id, self.log.save_all(project)

    def ensure_dataset_unchanged(self, org_id: str, project_id: str, dataset_id: str) -> None:
        """Before a launch rents anything: the object still has the registered bytes."""
        dv = self.log.project(org_id, project_id).datasets.get(dataset_id)
        if dv is None:
            raise DatasetNotFound(f"dataset version {dataset_id} not found in the project")
        loc, creds = self.storage.location(org_id)
        key = dv["object_key"]
        info = self.objects.head(loc, creds, key)
        if info is None:
            raise DatasetChanged(f"{key} no longer exists in storage")
        if info.size != dv["size_bytes"]:
            raise DatasetChanged(f"{key} is {info.size} bytes; {dv['size_bytes']} were registered")
        digest = stored_sha256(self.objects, loc, creds, key)
        if digest != dv["sha256"]:
            raise DatasetChanged(f"{key} has sha256 {digest}; {dv['sha256']} was registered")

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
        """Record numbers computed elsewhere (the legacy-log generator); the API never calls
        this: it registers with `register_dataset`, which reads the object back."""
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
