"""Whose request this is (N7): the peer's address, or the address a trusted proxy forwarded.

`X-Forwarded-For` is anyone's to write. It is read only when the connection comes from a proxy
the operator named (`TENSORANT_TRUSTED_PROXIES`, empty by default), and then from the right:
each trusted hop is skipped and the first address a trusted proxy did not add is the client's;
such a proxy's `X-Forwarded-Proto` is believed too (the console's secure cookie and its origin
check behind a TLS-terminating proxy). Uvicorn's own proxy-header rewriting is switched off
where we start it (it trusts loopback by default), so the failed-authentication throttle's key
cannot be rotated or forged from an untrusted peer.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from starlette.datastructures import Headers
from starlette.requests import HTTPConnection
from starlette.types import ASGIApp, Receive, Scope, Send

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """Addresses and CIDR networks (`10.0.0.0/8`, `::1`); a ValueError names a bad one."""
    networks = []
    for value in values:
        try:
            networks.append(ipaddress.ip_network(value.strip(), strict=False))
        except ValueError:
            raise ValueError(f"{value!r} is not an IP address or network") from None
    return tuple(networks)


def _trusted(address: str, proxies: Sequence[Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in proxies)


def forwarded_client(peer: str, forwarded_for: list[str], proxies: Sequence[Network]) -> str:
    """The client's address: `peer`, unless it is a trusted proxy; then the right-most
    address of `X-Forwarded-For` (all its headers, in order) that no trusted proxy added."""
    if not proxies or not _trusted(peer, proxies):
        return peer
    hops = [hop.strip() for header in forwarded_for for hop in header.split(",") if hop.strip()]
    for hop in reversed(hops):
        if not _trusted(hop, proxies):
            try:
                return str(ipaddress.ip_address(hop))
            except ValueError:
                return peer  # a proxy we trust forwarded garbage: count it on the proxy
    return hops[0] if hops else peer


class TrustedProxies:
    """Pure ASGI: a request from a trusted proxy gets the client address and scheme it
    forwarded (`scope["client"]`, `scope["scheme"]`); any other request is left as it came."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        proxies: tuple[Network, ...] = getattr(scope["app"].state, "trusted_proxies", ())
        client = scope.get("client")
        if proxies and scope["type"] in ("http", "websocket") and client:
            peer = client[0]
            if _trusted(peer, proxies):
                headers = Headers(scope=scope)
                scope = dict(scope)
                address = forwarded_client(peer, headers.getlist("x-forwarded-for"), proxies)
                scope["client"] = (address, 0 if address != peer else client[1])
                proto = headers.get("x-forwarded-proto", "").split(",")[-1].strip().lower()
                if proto in ("http", "https"):
                    scope["scheme"] = (
                        proto if scope["type"] == "http" else {"http": "ws", "https": "wss"}[proto]
                    )
        await self.app(scope, receive, send)


def client_address(connection: HTTPConnection) -> str:
    """The client's address for throttling (`TrustedProxies` put it in the scope)."""
    return connection.client.host if connection.client else "-"
