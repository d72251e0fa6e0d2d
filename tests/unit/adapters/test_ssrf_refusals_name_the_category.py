"""An SSRF refusal names the category of address, never the address."""

from __future__ import annotations

import pytest

from adapters.ssrf import check_endpoint
from application.errors import UnsafeEndpoint


@pytest.mark.parametrize(
    ("address", "category"),
    [
        ("10.1.2.3", "a private address"),
        ("127.0.0.1", "a loopback address"),
        ("169.254.169.254", "a cloud metadata address"),
        ("fd12:3456:789a::1", "a private address"),
    ],
)
def test_the_refusal_names_the_category_only(address: str, category: str) -> None:
    with pytest.raises(UnsafeEndpoint) as refused:
        check_endpoint("https://s3.internal.example/", resolver=lambda host, port: [address])
    assert category in refused.value.detail
    assert address not in refused.value.detail and "internal.example" not in refused.value.detail


def test_an_unresolvable_host_is_not_echoed() -> None:
    def fails(host: str, port: int) -> list[str]:
        raise OSError("Name or service not known: s3.secret-host.example")

    with pytest.raises(UnsafeEndpoint) as refused:
        check_endpoint("https://s3.secret-host.example/", resolver=fails)
    assert "secret-host" not in refused.value.detail
