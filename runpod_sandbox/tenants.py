"""Tenant keys: many RunPod users in one sandbox process (the scale bench's organizations).

`<seeded key>~<tenant>` is accepted wherever the seeded key is, with the same role; it has its
own rate-limit windows (a user's quota, as on RunPod), and the Pods created with it are the only
ones it lists or finds, as another user's Pods are invisible on RunPod. The seeded keys
themselves are the tenant "" and see only Pods created with them, so nothing changes for a
sandbox used without tenant keys. The tenant of the request is a context variable set by
`TenantMiddleware` and read by the model's Pod reads and creates.
"""

from __future__ import annotations

from contextvars import ContextVar

from starlette.types import ASGIApp, Receive, Scope, Send

SEP = "~"
current: ContextVar[str] = ContextVar("sandbox_tenant", default="")


def account_key(key: str) -> str:
    """The seeded key a tenant key stands for (any other key unchanged)."""
    return key.split(SEP, 1)[0] if SEP in key else key


def tenant_of(key: str) -> str:
    return key.split(SEP, 1)[1] if SEP in key else ""


def key_for(base_key: str, tenant: str) -> str:
    return f"{base_key}{SEP}{tenant}"


class TenantMiddleware:
    """Sets `current` from the request's Bearer key (or `?api_key=`, GraphQL's docs style)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        key = ""
        for name, value in scope.get("headers", []):
            if name.lower() == b"authorization":
                text = value.decode(errors="replace")
                if text.lower().startswith("bearer "):
                    key = text[7:].strip()
        if not key and b"api_key=" in scope.get("query_string", b""):
            from urllib.parse import parse_qs

            found = parse_qs(scope["query_string"].decode(errors="replace")).get("api_key")
            key = found[0] if found else ""
        token = current.set(tenant_of(key))
        try:
            await self.app(scope, receive, send)
        finally:
            current.reset(token)
