"""HTTP with the stdlib: presigned GETs and PUTs (custom S3) and callback POSTs.

Errors name the URL without its query, so a presigned signature never reaches a log line."""

from __future__ import annotations

import hashlib
import http.client
import os
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from trainer.protocol import redact_url

CHUNK = 1024 * 1024


class TransferError(OSError):
    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _request(url: str, *, data: Any = None, method: str = "GET") -> urllib.request.Request:
    """Only http(s): a manifest can never make the trainer open file:// or other schemes."""
    if not url.startswith(("http://", "https://")):
        raise TransferError(f"not an http(s) URL: {redact_url(url)}")
    return urllib.request.Request(url, data=data, method=method)  # noqa: S310 - checked above


def _open(request: urllib.request.Request, timeout: float) -> Any:
    try:
        return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 - scheme checked
    except urllib.error.HTTPError as e:
        e.close()
        raise TransferError(
            f"{request.get_method()} {redact_url(request.full_url)} answered {e.code}",
            status=e.code,
        ) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise TransferError(
            f"{request.get_method()} {redact_url(request.full_url)} failed: {reason}"
        ) from None


def _retrying(attempts: int, action: Any) -> Any:
    for attempt in range(1, attempts + 1):
        try:
            return action()
        except TransferError as e:
            permanent = (
                e.status is not None and 400 <= e.status < 500 and e.status not in (408, 429)
            )
            if permanent or attempt == attempts:
                raise
            time.sleep(min(2.0**attempt, 10.0))
    raise AssertionError("unreachable")


def get_bytes(url: str, *, limit: int, timeout: float = 30, attempts: int = 3) -> bytes:
    def once() -> bytes:
        with _open(_request(url), timeout) as r:
            data: bytes = r.read(limit + 1)
        if len(data) > limit:
            raise TransferError(f"GET {redact_url(url)}: more than {limit} bytes")
        return data

    result: bytes = _retrying(attempts, once)
    return result


def get_with_token(
    url: str, token: str, *, limit: int, timeout: float = 10, attempts: int = 3
) -> bytes:
    """A GET authenticated with the run token (the control plane's trainer routes)."""

    def once() -> bytes:
        req = _request(url)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        with _open(req, timeout) as r:
            data: bytes = r.read(limit + 1)
        if len(data) > limit:
            raise TransferError(f"GET {redact_url(url)}: more than {limit} bytes")
        return data

    result: bytes = _retrying(attempts, once)
    return result


def get_to_file(url: str, dest: Path, *, timeout: float = 60, attempts: int = 3) -> str:
    """Download to `dest` (temp name, then rename); returns the sha256 of what was written."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".part")

    def once() -> str:
        digest = hashlib.sha256()
        with _open(_request(url), timeout) as r, tmp.open("wb") as f:
            while chunk := r.read(CHUNK):
                digest.update(chunk)
                f.write(chunk)
        os.replace(tmp, dest)
        return digest.hexdigest()

    result: str = _retrying(attempts, once)
    return result


def put_bytes(url: str, data: bytes, *, timeout: float = 10, attempts: int = 1) -> None:
    def once() -> None:
        req = _request(url, data=data, method="PUT")
        req.add_header("Content-Type", "application/json")
        with _open(req, timeout):
            pass

    _retrying(attempts, once)


def put_file(url: str, path: Path, *, timeout: float = 120, attempts: int = 3) -> None:
    """Upload a file in one streamed PUT (presigned; S3 takes up to 5 GB in one PUT)."""

    def once() -> None:
        size = path.stat().st_size
        with path.open("rb") as f:
            req = _request(url, data=f, method="PUT")
            req.add_header("Content-Length", str(size))
            req.add_header("Content-Type", "application/zip")
            with _open(req, timeout):
                pass

    _retrying(attempts, once)


def post_json(url: str, body: bytes, token: str, *, timeout: float) -> int:
    req = _request(url, data=body, method="POST")
    req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with _open(req, timeout) as r:
        status: int = r.status
    return status
