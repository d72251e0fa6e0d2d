"""The adapter in hand (R19): a verified adapter's bytes, as the run verified them.

A network volume has no presigned URLs a browser can use, so its adapter is streamed through
the API; custom S3 answers with a presigned GET that lives minutes. Streamed bytes are checked
against the sha256 the run shows before the first byte leaves: an object changed in storage
after verification is refused, never handed out as the verified adapter.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from api.actions.runs import run_doc
from api.deps import Backend, Caller
from domain.errors import Conflict
from domain.storage import CUSTOM_S3

URL_LIFETIME_S = 300  # a presigned GET for a download lives minutes, not the run's lifetime
CHUNK = 1024 * 1024


class AdapterNotReady(Conflict):
    problem = "adapter-not-ready"
    title = "The run has no verified adapter"


class AdapterChanged(Conflict):
    problem = "adapter-changed"
    title = "The adapter in storage is not the one the run verified"


@dataclass(frozen=True)
class AdapterDownload:
    filename: str
    sha256: str
    size_bytes: int
    path: Path | None = None  # the checked bytes in a temporary file (network volume)
    url: str | None = None  # a presigned GET (custom S3)


def download(*, backend: Backend, caller: Caller, run_id: str) -> AdapterDownload:
    """The run's verified adapter: a temporary file whose sha256 and size are the run's (the
    caller deletes it), or a short-lived presigned GET on custom S3."""
    doc = run_doc(backend.views, caller.org_id, run_id)
    adapter = doc.get("adapter") or {}
    if not adapter.get("object_key") or not adapter.get("verified_at"):
        raise AdapterNotReady(
            f"run {run_id} has no verified adapter (state {doc['state']}); "
            "a run's adapter can be downloaded once it is verified"
        )
    key, sha256, size = adapter["object_key"], adapter["sha256"], int(adapter["size_bytes"])
    storage = backend.services.storage
    location, credentials = storage.location(caller.org_id)
    found = AdapterDownload(f"adapter-{run_id[:8]}-{sha256[:12]}.zip", sha256, size)
    if location.kind == CUSTOM_S3:
        url = storage.objects.presign_get(location, credentials, key, URL_LIFETIME_S)
        return AdapterDownload(found.filename, sha256, size, url=url)
    fd, name = tempfile.mkstemp(prefix="tensorant-adapter-", suffix=".zip")
    path = Path(name)
    try:
        with os.fdopen(fd, "w+b") as into:
            present = storage.objects.download(location, credentials, key, into)
            into.seek(0)
            digest, read = hashlib.sha256(), 0
            while chunk := into.read(CHUNK):
                digest.update(chunk)
                read += len(chunk)
        if not present or (digest.hexdigest(), read) != (sha256, size):
            raise AdapterChanged(
                f"the object {key} no longer holds the adapter run {run_id} verified "
                f"(sha256 {sha256[:12]}…, {size} bytes); nothing was sent"
            )
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return AdapterDownload(found.filename, sha256, size, path=path)
