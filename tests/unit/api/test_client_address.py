"""N7: X-Forwarded-For (and -Proto) is believed only from a trusted proxy, read from the right."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from api.client_address import TrustedProxies, parse_networks
from entrypoints.settings import Settings


def _seen(peer: str, headers: dict[str, list[str]], trusted: list[str]) -> dict[str, Any]:
    """The scope the app behind `TrustedProxies` is given."""
    seen: dict[str, Any] = {}

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.update(scope)

    state = SimpleNamespace(trusted_proxies=parse_networks(trusted))
    scope = {
        "type": "http",
        "scheme": "http",
        "client": (peer, 5555),
        "headers": [(k.encode(), v.encode()) for k, vs in headers.items() for v in vs],
        "app": SimpleNamespace(state=state),
    }
    # Driven by hand, not by an event loop: the middleware awaits nothing but the app, and a
    # test process may have a loop running already (Playwright's).
    step = TrustedProxies(app)(scope, None, None)  # type: ignore[arg-type]
    with pytest.raises(StopIteration):
        step.send(None)
    return seen


XFF = "x-forwarded-for"


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
    assert _seen(peer, {XFF: forwarded}, trusted)["client"][0] == client


def test_the_scheme_is_a_trusted_proxy_s_to_say() -> None:
    https = {"x-forwarded-proto": ["https"]}
    assert _seen("10.0.0.5", https, ["10.0.0.0/8"])["scheme"] == "https"
    assert _seen("192.0.2.1", https, ["10.0.0.0/8"])["scheme"] == "http"
    assert _seen("127.0.0.1", https, [])["scheme"] == "http"


def test_trusted_proxies_is_empty_by_default_and_checked() -> None:
    assert Settings().trusted_proxies == []
    assert Settings(trusted_proxies="10.0.0.0/8, ::1").trusted_proxies == ["10.0.0.0/8", "::1"]
    with pytest.raises(ValueError, match="not an IP address"):
        Settings(trusted_proxies="proxy.example.com")
