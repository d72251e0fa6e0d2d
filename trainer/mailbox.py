"""The mailbox on the organization's storage, the channel of record (T1).

On a network volume the files are written under the mount (temp name, fsync, rename, so a
reader never sees half a file); on custom S3 through the manifest's presigned PUTs."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from trainer import transfer
from trainer.protocol import MailboxUrls, log_chunk_key, result_key, status_key
from trainer.settings import Settings


def write_atomically(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a directory be fsynced
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class Mailbox(Protocol):
    def write_status(self, data: bytes) -> None: ...
    def write_log_chunk(self, boot: str, first_seq: int, data: bytes) -> None: ...
    def write_result(self, data: bytes) -> None: ...
    def has_result(self) -> bool: ...


class VolumeMailbox:
    """`runs/<id>/...` under the volume mount (the control plane reads it through the S3 API)."""

    def __init__(self, settings: Settings) -> None:
        self._s = settings

    def _path(self, key: str) -> Path:
        return self._s.object_path(key)

    def write_status(self, data: bytes) -> None:
        write_atomically(self._path(status_key(self._s.run_id)), data)

    def write_log_chunk(self, boot: str, first_seq: int, data: bytes) -> None:
        write_atomically(self._path(log_chunk_key(self._s.run_id, boot, first_seq)), data)

    def write_result(self, data: bytes) -> None:
        write_atomically(self._path(result_key(self._s.run_id)), data)

    def has_result(self) -> bool:
        return self._path(result_key(self._s.run_id)).exists()


class PresignedMailbox:
    """Custom S3: one PUT per file. Log chunk URLs are a fixed pool; which ones were used is
    kept on the volume disk so a restarted container does not overwrite earlier chunks. When the
    pool runs out the last URL holds a rolling tail of the log."""

    def __init__(self, settings: Settings, urls: MailboxUrls, *, timeout: float = 10) -> None:
        self._urls = urls
        self._timeout = timeout
        self._state = settings.work_dir / "mailbox-pool.json"
        self._next = self._load_next()
        self._tail: list[bytes] = []

    def _load_next(self) -> int:
        try:
            return int(json.loads(self._state.read_text())["next"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0

    def _put(self, url: str, data: bytes) -> None:
        transfer.put_bytes(url, data, timeout=self._timeout, attempts=2)

    def write_status(self, data: bytes) -> None:
        self._put(self._urls.status_url, data)

    def write_log_chunk(self, boot: str, first_seq: int, data: bytes) -> None:
        pool: Sequence[str] = self._urls.log_urls
        if not pool:
            return
        if self._next < len(pool) - 1:
            self._put(pool[self._next], data)
            self._next += 1
            write_atomically(self._state, json.dumps({"next": self._next}).encode())
            return
        # The last URL: keep rewriting it with the newest lines (bounded).
        self._tail = (self._tail + data.splitlines(keepends=True))[-2000:]
        self._put(pool[-1], b"".join(self._tail))

    def write_result(self, data: bytes) -> None:
        transfer.put_bytes(self._urls.result_url, data, timeout=self._timeout, attempts=4)

    def has_result(self) -> bool:
        return False  # a trainer cannot read custom S3; the local final record answers this
