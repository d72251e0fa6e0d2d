"""Redirects to ourselves name a path, never a host: Starlette's trailing-slash redirect builds an
absolute `Location` from the request's `Host` header, which the client writes; a cache or proxy
that keys on the path alone would then send others to a host of the attacker's choice. An
absolute `Location` naming the request's own `Host` is cut to its path and query; one naming
another host on purpose (a presigned storage URL, R19) is left as it is."""

from __future__ import annotations

from urllib.parse import urlsplit

from starlette.types import ASGIApp, Message, Receive, Scope, Send

REDIRECTS = frozenset({301, 302, 303, 307, 308})


def relative(location: str, host: str | None = None) -> str:
    """`location`'s path and query ('/' when it has no path); a relative one, or one naming a
    host other than `host` (when given), as it is."""
    parts = urlsplit(location)
    if not parts.scheme and not parts.netloc:
        return location
    if host is not None and parts.netloc.lower() != host.lower():
        return location
    path = parts.path or "/"
    # `//host/...` would be read as another host again: one leading slash only.
    path = "/" + path.lstrip("/")
    return f"{path}?{parts.query}" if parts.query else path


class RelativeRedirects:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        host = next(
            (v.decode("latin-1") for k, v in scope.get("headers", []) if k == b"host"), None
        )

        async def relative_send(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] in REDIRECTS:
                message = dict(message)
                message["headers"] = [
                    (name, relative(value.decode("latin-1"), host).encode("latin-1"))
                    if name.lower() == b"location"
                    else (name, value)
                    for name, value in message.get("headers", [])
                ]
            await send(message)

        await self.app(scope, receive, relative_send)
