"""S4: custom S3 endpoints must be https to public addresses unless allow-listed by the operator."""

from __future__ import annotations

import pytest

from adapters.ssrf import Resolver, blocked_reason, check_endpoint
from application.errors import UnsafeEndpoint


def resolver_of(table: dict[str, list[str]]) -> Resolver:
    def resolve(host: str, port: int) -> list[str]:
        if host not in table:
            raise OSError("Name or service not known")
        return table[host]

    return resolve


PUBLIC = resolver_of({"s3.example.com": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"]})


def test_a_public_https_endpoint_passes() -> None:
    check_endpoint("https://s3.example.com", resolver=PUBLIC)
    check_endpoint("https://s3.example.com:8443/prefix", resolver=PUBLIC)


def test_plain_http_is_refused() -> None:
    with pytest.raises(UnsafeEndpoint, match="https"):
        check_endpoint("http://s3.example.com", resolver=PUBLIC)


@pytest.mark.parametrize("url", ["ftp://s3.example.com", "s3.example.com", "https://", "file:///x"])
def test_urls_without_https_scheme_or_host_are_refused(url: str) -> None:
    with pytest.raises(UnsafeEndpoint):
        check_endpoint(url, resolver=PUBLIC)


def test_user_information_in_the_url_is_refused() -> None:
    with pytest.raises(UnsafeEndpoint, match="user information"):
        check_endpoint("https://a:b@s3.example.com", resolver=PUBLIC)


@pytest.mark.parametrize(
    ("address", "why"),
    [
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.9", "private"),
        ("192.168.1.1", "private"),
        ("169.254.169.254", "metadata"),
        ("169.254.10.10", "link-local"),
        ("0.0.0.0", "unspecified"),  # noqa: S104 - a resolved address, not a bind
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("100.64.0.1", "not a public"),
        ("100.100.100.200", "metadata"),
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fd00:ec2::254", "metadata"),
        ("fc00::5", "private"),
        ("ff02::1", "multicast"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "metadata"),
        ("::ffff:10.0.0.1", "private"),
        ("64:ff9b::a9fe:a9fe", "metadata"),
        ("2002:7f00:1::", "loopback"),
    ],
)
def test_hosts_resolving_to_internal_addresses_are_refused(address: str, why: str) -> None:
    resolver = resolver_of({"evil.example.com": ["93.184.216.34", address]})
    with pytest.raises(UnsafeEndpoint, match=why) as exc:
        check_endpoint("https://evil.example.com", resolver=resolver)
    assert address not in exc.value.detail  # the category only


def test_an_ip_literal_host_is_checked_too() -> None:
    with pytest.raises(UnsafeEndpoint, match="metadata"):
        check_endpoint(
            "https://169.254.169.254/latest",
            resolver=resolver_of({"169.254.169.254": ["169.254.169.254"]}),
        )
    with pytest.raises(UnsafeEndpoint, match="loopback"):
        check_endpoint("https://[::1]:9000", resolver=resolver_of({"::1": ["::1"]}))


def test_an_unresolvable_host_is_refused_clearly() -> None:
    with pytest.raises(UnsafeEndpoint, match="does not resolve"):
        check_endpoint("https://nowhere.invalid", resolver=resolver_of({}))


def test_allow_listed_host_port_passes_even_over_http_and_loopback() -> None:
    loopback = resolver_of({"127.0.0.1": ["127.0.0.1"]})
    check_endpoint("http://127.0.0.1:8000/s3/eur-is-1", allow=["127.0.0.1:8000"], resolver=loopback)
    check_endpoint(
        "http://127.0.0.1:8000/s3/custom", allow=["http://127.0.0.1:8000/s3/"], resolver=loopback
    )
    check_endpoint("http://127.0.0.1:8000", allow=["http://127.0.0.1:8000"], resolver=loopback)


@pytest.mark.parametrize(
    ("url", "entry"),
    [
        ("http://127.0.0.1:8001", "127.0.0.1:8000"),
        ("http://127.0.0.1:8000", "http://127.0.0.1:800"),
        ("http://127.0.0.1:8000@169.254.169.254/", "http://127.0.0.1:8000"),
        ("http://127.0.0.1:9000/other", "http://127.0.0.1:9000/s3/"),
        ("http://localhost:8000", "127.0.0.1:8000"),
    ],
)
def test_the_allow_list_admits_only_what_it_names(url: str, entry: str) -> None:
    resolver = resolver_of(
        {h: ["127.0.0.1"] for h in ("127.0.0.1", "localhost", "169.254.169.254")}
    )
    with pytest.raises(UnsafeEndpoint):
        check_endpoint(url, allow=[entry], resolver=resolver)


def test_public_addresses_have_no_blocked_reason() -> None:
    assert blocked_reason("8.8.8.8") is None
    assert blocked_reason("2001:4860:4860::8888") is None
    assert blocked_reason("::ffff:8.8.8.8") is None
