"""Whose request this is (N7): the peer's address, or the address a trusted proxy forwarded.

`X-Forwarded-For` is anyone's to write. It is read only when the connection comes from a proxy
the operator named (`TENSORANT_TRUSTED_PROXIES`, empty by default), and then from the right:
each trusted hop is skipped and the first address a trusted proxy did not add is the client's.
Uvicorn's own proxy-header rewriting is switched off where we start it (it trusts loopback by
default), so the throttle's key cannot be rotated or forged from an untrusted peer.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.requests import HTTPConnection

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


def _trusted(address: str, proxies: tuple[Network, ...]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in network for network in proxies)


def client_address(connection: HTTPConnection) -> str:
    """The client's address for throttling and logs (see the module's docstring)."""
    peer = connection.client.host if connection.client else "-"
    proxies: tuple[Network, ...] = getattr(connection.app.state, "trusted_proxies", ())
    if not proxies or not _trusted(peer, proxies):
        return peer
    hops = [
        hop.strip()
        for header in connection.headers.getlist("x-forwarded-for")
        for hop in header.split(",")
        if hop.strip()
    ]
    for hop in reversed(hops):
        if not _trusted(hop, proxies):
            try:
                return str(ipaddress.ip_address(hop))
            except ValueError:
                return peer  # a proxy we trust forwarded garbage: count it on the proxy
    return hops[0] if hops else peer
