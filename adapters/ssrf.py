"""The S4 guard: a custom S3 endpoint must be https and resolve only to public addresses.

The check resolves the host at check time; a later connection resolves again, so a DNS answer
that changes in between (rebinding) is not covered here; the bounded client timeouts and the
absence of redirects in botocore keep that window small.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Sequence
from urllib.parse import urlsplit

from application.errors import UnsafeEndpoint

Resolver = Callable[[str, int], list[str]]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Cloud metadata services; most are link-local or private anyway, named here for clear messages.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, ...
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "192.0.0.192",  # Oracle Cloud
    )
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_DEFAULT_PORTS = {"http": 80, "https": 443}


def system_resolver(host: str, port: int) -> list[str]:
    """Every address getaddrinfo gives for host:port (TCP)."""
    infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    return [str(info[4][0]).split("%", 1)[0] for info in infos]


def check_endpoint(
    url: str, allow: Sequence[str] = (), *, resolver: Resolver | None = None
) -> None:
    """Raise UnsafeEndpoint unless `url` is https to public addresses or operator-allow-listed.

    `allow` entries are `host:port`, a bare `host` (its scheme's default port), or a URL prefix
    such as `http://127.0.0.1:8000/s3/`; an allow-listed endpoint may also use http.
    """
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise UnsafeEndpoint(f"the endpoint URL is malformed: {exc}") from None
    scheme, host = parts.scheme.lower(), (parts.hostname or "").lower()
    if scheme not in _DEFAULT_PORTS or not host:
        raise UnsafeEndpoint("the endpoint must be an https:// URL with a host name")
    if parts.username is not None or parts.password is not None:
        raise UnsafeEndpoint("the endpoint URL must not contain user information")
    port = port or _DEFAULT_PORTS[scheme]
    if _allowed(url.strip(), scheme, host, port, allow):
        return
    if scheme != "https":
        raise UnsafeEndpoint(f"the endpoint must use https, not {scheme}")
    try:
        addresses = (resolver or system_resolver)(host, port)
    except (OSError, UnicodeError) as exc:
        # Neither the resolver's message nor any address: the category is enough to act on.
        raise UnsafeEndpoint("the endpoint host does not resolve") from exc
    if not addresses:
        raise UnsafeEndpoint("the endpoint host does not resolve")
    for text in addresses:
        reason = blocked_reason(text)
        if reason:
            # The category only: naming the address would map the internal network for a caller.
            raise UnsafeEndpoint(f"the endpoint host resolves to {reason}")


def blocked_reason(text: str) -> str | None:
    """Why a connection to this address is refused, or None when it is a public address."""
    try:
        address: IPAddress = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return "not an IP address"
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            inner = blocked_reason(str(embedded))
            return f"{inner} (embedded in an IPv6 address)" if inner else None
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    for name, flag in (
        ("loopback", address.is_loopback),
        ("unspecified", address.is_unspecified),
        ("link-local", address.is_link_local),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
        ("private", address.is_private),
    ):
        if flag:
            return f"a {name} address"
    if not address.is_global:
        return "not a public address"
    return None


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    packed = address.packed
    if packed[:12] == bytes(12) and int(address) > 1:  # deprecated IPv4-compatible ::a.b.c.d
        return ipaddress.IPv4Address(packed[12:])
    return None


def _allowed(url: str, scheme: str, host: str, port: int, allow: Sequence[str]) -> bool:
    bracketed = f"[{host}]" if ":" in host else host
    for raw in allow:
        entry = raw.strip().lower()
        if not entry:
            continue
        if "://" in entry:
            if _prefix_match(url, raw.strip()):
                return True
        elif entry in (f"{bracketed}:{port}", f"{host}:{port}") or (
            entry in (host, bracketed) and port == _DEFAULT_PORTS[scheme]
        ):
            return True
    return False


def _prefix_match(url: str, prefix: str) -> bool:
    """`prefix` starts `url` and ends at a boundary (so `:800` never admits `:8000` or `@evil`)."""
    if not url.lower().startswith(prefix.lower()):
        return False
    path = url[len(prefix) :].lower()
    if "/../" in f"/{path}/" or "%2e" in path or "\\" in path:
        return False  # a dot-segment would climb out of the allowed prefix
    rest = url[len(prefix) :]
    return prefix.endswith("/") or rest == "" or rest[0] in "/?#"
