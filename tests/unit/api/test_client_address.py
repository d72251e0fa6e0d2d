"""N7: X-Forwarded-For is believed only from a trusted proxy, read from the right."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from starlette.requests import Request

from api.client_address import client_address, parse_networks
from entrypoints.settings import Settings


def _request(peer: str, forwarded: list[str], trusted: list[str]) -> Request:
    app = SimpleNamespace(state=SimpleNamespace(trusted_proxies=parse_networks(trusted)))
    scope = {
        "type": "http",
        "client": (peer, 5555),
        "headers": [(b"x-forwarded-for", v.encode()) for v in forwarded],
        "app": app,
    }
    return Request(scope)


@pytest.mark.parametrize(
    ("peer", "forwarded", "trusted", "client"),
    [
        ("127.0.0.1", ["203.0.113.9"], [], "127.0.0.1"),  # nothing trusted: the peer
        ("192.0.2.1", ["203.0.113.9"], ["10.0.0.0/8"], "192.0.2.1"),  # untrusted peer
        ("10.0.0.5", ["203.0.113.9"], ["10.0.0.0/8"], "203.0.113.9"),
        # A forged left-most entry is skipped: the right-most untrusted hop is the client.
        ("10.0.0.5", ["6.6.6.6, 203.0.113.9, 10.0.0.7"], ["10.0.0.0/8"], "203.0.113.9"),
        ("10.0.0.5", ["6.6.6.6", "203.0.113.9"], ["10.0.0.0/8"], "203.0.113.9"),
        ("10.0.0.5", ["not-an-ip"], ["10.0.0.0/8"], "10.0.0.5"),
        ("10.0.0.5", [], ["10.0.0.0/8"], "10.0.0.5"),
        ("::1", ["2001:db8::1"], ["::1"], "2001:db8::1"),
    ],
)
def test_the_client_address(
    peer: str, forwarded: list[str], trusted: list[str], client: str
) -> None:
    assert client_address(_request(peer, forwarded, trusted)) == client


def test_trusted_proxies_is_empty_by_default_and_checked() -> None:
    assert Settings().trusted_proxies == []
    assert Settings(trusted_proxies="10.0.0.0/8, ::1").trusted_proxies == ["10.0.0.0/8", "::1"]
    with pytest.raises(ValueError, match="not an IP address"):
        Settings(trusted_proxies="proxy.example.com")
