"""Structured logs (O3): one JSON object per line, with the request id and any `extra` fields."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from domain.times import iso

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime"}
# What `json.dumps(entry, ensure_ascii=False)` writes, without building an encoder per line.
_ENCODE = json.JSONEncoder(ensure_ascii=False).encode


class JsonFormatter(logging.Formatter):
    """`{"time", "level", "logger", "message", ...extra}`; exceptions as `exc_info` text."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": iso(datetime.fromtimestamp(record.created, UTC)),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and not key.startswith("_"):
                plain = isinstance(value, str | int | float | bool | None)
                entry[key] = value if plain else str(value)
        if record.exc_info:
            entry["exc_info"] = self.formatException(record.exc_info)
        return _ENCODE(entry)


class UrlQueryRedaction(logging.Filter):
    """httpx logs every request's full URL at INFO: a presigned S3 URL's query is a credential
    for days (its key id and signature), and a webhook receiver's may carry its token. The line
    keeps the method, scheme, host and path, and says the query was left out."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) >= 2:
            url = str(args[1])
            if "?" in url:
                record.args = (args[0], url.split("?", 1)[0] + "?[query redacted]", *args[2:])
        return True


def redact_request_urls() -> None:
    """Install `UrlQueryRedaction` on the HTTP clients' loggers (once; idempotent)."""
    for name in ("httpx", "httpx2"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, UrlQueryRedaction) for f in logger.filters):
            logger.addFilter(UrlQueryRedaction())


def configure(level: str = "INFO", fmt: str = "json") -> None:
    """Root logging for `serve`, `worker` and `projector`; `fmt` is `json` or `text`."""
    handler = logging.StreamHandler()
    handler.setFormatter(
        JsonFormatter()
        if fmt == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    redact_request_urls()
    # Neither format writes where a call was made, nor its thread or process: the logging
    # HOWTO's "Optimization" switches leave them out of every record (a frame walk and three
    # lookups per line; the access line is written on every request).
    logging._srcfile = None  # the documented switch
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
