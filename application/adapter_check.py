"""R7: an exported adapter verified for what it is (`domain/lora.py`), streamed from storage.

The object is read in chunks into a spooled temporary file (memory below `SPOOL_BYTES`, disk
above) and checked there without extracting anything; an object larger than the base model's
largest possible adapter is refused from its size alone, before a byte is read.
"""

from __future__ import annotations

import hashlib
import tempfile
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO, cast

from application.ports import ObjectStore, S3Credentials, StorageLocation
from domain.lora import (
    CATALOGUE_ARCHITECTURES,
    AdapterDefect,
    AdapterRejected,
    AdapterSummary,
    Architecture,
    verify_adapter,
)
from trainer.protocol import bounded_loads, verified_key

SPOOL_BYTES = 8 * 1024 * 1024
MAX_CONFIG_BYTES = 1024 * 1024
STORAGE_PREFIX = "storage:"
# Reason codes besides domain.lora's AdapterDefect: what the control plane cannot even start on.
ADAPTER_MISSING = "adapter_missing"
BASE_MODEL_UNKNOWN = "adapter_base_model_unknown"


@dataclass(frozen=True)
class AdapterVerdict:
    """The summary of an adapter that passed, or the reason code and detail of its defect."""

    summary: AdapterSummary | None
    reason: str = ""
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.summary is not None


def _spool() -> BinaryIO:
    return cast(BinaryIO, tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES))


def read_model_config(
    objects: ObjectStore, location: StorageLocation, creds: S3Credentials, folder: str
) -> dict[str, object] | None:
    """A storage model folder's config.json, or None when absent, too big or not an object."""
    key = folder.strip("/") + "/config.json"
    info = objects.head(location, creds, key)
    if info is None or info.size > MAX_CONFIG_BYTES:
        return None
    try:
        body = bounded_loads(objects.get(location, creds, key))
    except (ValueError, UnicodeDecodeError):
        return None
    return body if isinstance(body, dict) else None


def architecture_for(
    base_model: str, objects: ObjectStore, location: StorageLocation, creds: S3Credentials
) -> Architecture | None:
    """The catalogue's numbers, or those of a `storage:models/<folder>` model's config.json."""
    arch = CATALOGUE_ARCHITECTURES.get(base_model)
    if arch is not None or not base_model.startswith(STORAGE_PREFIX):
        return arch
    config = read_model_config(objects, location, creds, base_model.removeprefix(STORAGE_PREFIX))
    if config is None:
        return None
    try:
        return Architecture.from_config(config)
    except ValueError:
        return None


def verify_stored_adapter(
    objects: ObjectStore,
    location: StorageLocation,
    creds: S3Credentials,
    key: str,
    *,
    base_model: str,
    sha256: str | None,
    size_bytes: int | None,
    defer: Callable[[BinaryIO, Architecture], bool] | None = None,
) -> AdapterVerdict | None:
    """R7 on the object at `key`: every rule of domain/lora.py, each defect its own code.
    `defer(file, architecture)` may take the downloaded zip elsewhere (True): then None."""
    arch = architecture_for(base_model, objects, location, creds)
    if arch is None:
        return AdapterVerdict(
            None, BASE_MODEL_UNKNOWN, f"no architecture known for the base model {base_model!r}"
        )
    info = objects.head(location, creds, key)
    if info is None:
        return AdapterVerdict(None, ADAPTER_MISSING, f"{key} does not exist in storage")
    if info.size > arch.max_zip_bytes():
        return AdapterVerdict(
            None,
            AdapterDefect.TOO_LARGE,
            f"{info.size} bytes is more than an adapter of {base_model} can be",
        )
    with _spool() as f:
        if not objects.download(location, creds, key, f):
            return AdapterVerdict(None, ADAPTER_MISSING, f"{key} does not exist in storage")
        if defer is not None and defer(f, arch):
            return None  # a heavy check, queued elsewhere (application.heavy_checks)
        return _verify(f, base_model, arch, sha256, size_bytes)


def _verify(
    f: BinaryIO,
    base_model: str,
    architecture: Architecture,
    sha256: str | None,
    size_bytes: int | None,
) -> AdapterVerdict:
    try:
        summary = verify_adapter(
            f,
            base_model=base_model,
            architecture=architecture,
            sha256=sha256,
            size_bytes=size_bytes,
        )
    except AdapterRejected as e:
        return AdapterVerdict(None, e.reason, e.detail)
    return AdapterVerdict(summary)


def declared_bytes(stream: BinaryIO) -> int:
    """What the zip's members declare they inflate to (0 for what is not a readable zip: the
    verifier refuses that at once)."""
    stream.seek(0)
    try:
        total = sum(i.file_size for i in zipfile.ZipFile(stream).infolist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        total = 0
    stream.seek(0)
    return total


def verify_file(
    path: str,
    base_model: str,
    architecture: Architecture,
    sha256: str | None,
    size_bytes: int | None,
) -> AdapterVerdict:
    """R7 on a zip file on disk (what a heavy check runs in a child process)."""
    with open(path, "rb") as f:
        return _verify(f, base_model, architecture, sha256, size_bytes)


def pin_verified(
    objects: ObjectStore,
    location: StorageLocation,
    creds: S3Credentials,
    run_id: str,
    key: str,
    sha256: str,
) -> str | None:
    """N1: copy the adapter just verified at `key` to its pinned key (`verified_key`), which
    no URL a Pod holds can write; returns that key, or None when the object at `key` no longer
    has the verified sha256 (written again since: verify it again). The copy is made from the
    bytes whose sha256 was just computed, so what is pinned is what was verified. Idempotent:
    a pinned copy with that content is kept as it is."""
    pinned = verified_key(run_id, sha256)
    if key == pinned:
        return pinned
    if _sha256_of(objects, location, creds, pinned)[0] == sha256:
        return pinned  # pinned already (a retried drive)
    with tempfile.TemporaryFile() as f:
        digest, found = _sha256_of(objects, location, creds, key, into=f)
        if not found or digest != sha256:
            return None
        f.seek(0)
        objects.upload(location, creds, pinned, f)
    return pinned


def _sha256_of(
    objects: ObjectStore,
    location: StorageLocation,
    creds: S3Credentials,
    key: str,
    into: BinaryIO | None = None,
) -> tuple[str | None, bool]:
    """The object's sha256 (streamed; also written to `into`), and whether it exists."""
    with tempfile.TemporaryFile() as spare:
        target = into if into is not None else spare
        if not objects.download(location, creds, key, target):
            return None, False
        target.seek(0)
        digest = hashlib.sha256()
        while chunk := target.read(1 << 20):
            digest.update(chunk)
        return digest.hexdigest(), True
