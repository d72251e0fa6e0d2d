"""Bounded request bodies: a size cap on every body and a read timeout.

Pure ASGI, in front of every route: a declared `Content-Length` beyond the route's cap is
refused before a byte is read; a body without one (chunked) is counted as it arrives and
refused as soon as it passes the cap. A client that stops sending mid-body is answered 408
after `read_timeout_s`. The caps: multipart uploads (datasets, recovered adapters) have their
own; every other body, JSON on an upload route and a trainer's log batch too, gets
`default_bytes` (M2: the trainer keeps its batches under half of it).
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass, field

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from api.problems import problem_response
from application.runs import MAX_ADAPTER_UPLOAD

MIB = 1024 * 1024
_MULTIPART_OVERHEAD = MIB  # the form's boundaries and small fields beside the file
_UPLOADS = ("dataset_bytes", "adapter_bytes")  # caps that hold for a multipart form only


@dataclass(frozen=True)
class BodyCaps:
    default_bytes: int = MIB
    dataset_bytes: int = 1024 * MIB
    adapter_bytes: int = MAX_ADAPTER_UPLOAD
    read_timeout_s: float = 30.0
    _rules: list[tuple[re.Pattern[str], str]] = field(
        default_factory=lambda: [
            (re.compile(r"^(/v1)?/projects/[^/]+/datasets$"), "dataset_bytes"),
            (re.compile(r"^/v1/runs/[^/]+/recovery/upload$"), "adapter_bytes"),
            (re.compile(r"^/runs/[^/]+/upload$"), "adapter_bytes"),  # the console's form
        ]
    )

    def cap(self, path: str, content_type: str = "") -> int:
        """The route's cap for a body of `content_type`: an upload's cap is for its multipart
        form only (M2); the same route's JSON is read whole, so it gets `default_bytes`."""
        multipart = content_type.lower().lstrip().startswith("multipart/form-data")
        for pattern, name in self._rules:
            if pattern.match(path):
                if name in _UPLOADS:
                    if not multipart:
                        return self.default_bytes
                    return int(getattr(self, name)) + _MULTIPART_OVERHEAD
                return int(getattr(self, name))
        return self.default_bytes


class _Refused(Exception):
    pass


class BodyLimits:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        caps: BodyCaps = getattr(scope["app"].state, "body_caps", None) or BodyCaps()
        headers = Headers(scope=scope)
        cap = caps.cap(scope["path"], headers.get("content-type", ""))
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            await _too_large(cap)(scope, receive, send)
            return
        read = 0
        done = False
        failure: str | None = None
        started = False

        async def limited_receive() -> Message:
            nonlocal read, done, failure
            if done:  # the body is in: later receives wait for a disconnect, unbounded
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), caps.read_timeout_s)
            except TimeoutError:
                failure = "timeout"
                raise _Refused from None
            if message["type"] == "http.request":
                read += len(message.get("body", b""))
                if read > cap:
                    failure = "size"
                    raise _Refused
                done = not message.get("more_body", False)
            else:
                done = True
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if failure is not None and not started:
                return  # the app's answer to a body it could not read; ours goes instead
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except Exception:
            if failure is None or started:
                raise
        if failure is not None and not started:
            answer = _too_large(cap) if failure == "size" else _timed_out(caps.read_timeout_s)
            await answer(scope, receive, send)


def _too_large(cap: int) -> ASGIApp:
    return problem_response(
        413,
        "body-too-large",
        "The request body is larger than this endpoint accepts",
        f"this endpoint accepts at most {cap} bytes",
        # The rest of the body is never read: the connection closes instead of draining it.
        headers={"Connection": "close"},
        max_bytes=cap,
    )


def _timed_out(seconds: float) -> ASGIApp:
    return problem_response(
        408,
        "body-timeout",
        "The request body did not arrive in time",
        f"no part of the body arrived for {seconds:g} s; send it again",
        headers={"Connection": "close"},
    )
