"""Every request body is bounded in size and in time.

A declared body beyond the route's cap is refused before it is read; a chunked one as soon as
it passes the cap; a body that stops arriving is answered 408. Nothing accepted before is lost.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator

import pytest

from tests.e2e.conftest import Api, Org, problem
from tests.e2e.flows import private_stack

MIB = 1024 * 1024


def test_a_json_body_beyond_the_cap_is_a_413_before_it_is_read(api: Api, org: Org) -> None:
    kept = org.owner.post("/v1/members", json={"email": "kept@a.example", "role": "member"})
    assert kept.status_code == 201, kept.text
    body = json.dumps({"email": "x@a.example", "role": "member", "pad": "y" * (2 * MIB)})
    r = org.owner.post(
        "/v1/members", content=body.encode(), headers={"Content-Type": "application/json"}
    )
    found = problem(r, 413, "body-too-large")
    assert found["max_bytes"] == api.settings.max_body_bytes
    emails = _emails(org)
    assert "kept@a.example" in emails and "x@a.example" not in emails


def test_a_chunked_body_is_counted_as_it_arrives(api: Api, org: Org) -> None:
    def chunks() -> Iterator[bytes]:  # no Content-Length: httpx sends it chunked
        yield b'{"email": "x@a.example", "role": "member", "pad": "'
        for _ in range(3):
            yield b"y" * MIB
        yield b'"}'

    r = org.owner.post(
        "/v1/members", content=chunks(), headers={"Content-Type": "application/json"}
    )
    problem(r, 413, "body-too-large")
    assert "x@a.example" not in _emails(org)
    # A body under the cap, chunked, is read as usual.
    r = org.owner.post(
        "/v1/members",
        content=iter([b'{"email": "chunked@a.example", ', b'"role": "member"}']),
        headers={"Content-Type": "application/json"},
    )
    assert r.status_code == 201, r.text


def test_an_upload_route_has_its_own_larger_cap(api: Api, org: Org) -> None:
    """A dataset upload may be far larger than a JSON body; beyond its own cap it is a 413,
    answered from the declared length before any of the body is sent."""
    for path, declared in (
        ("/v1/projects/any/datasets", api.settings.max_dataset_bytes + 2 * MIB),
        ("/v1/members", 2 * MIB),
        ("/v1/runs/any/recovery/upload", 600 * MIB),
    ):
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {org.tokens['owner']}\r\n"
            "Content-Type: multipart/form-data; boundary=x\r\n"
            f"Content-Length: {declared}\r\n\r\n"
        )
        answer, _ = _raw(api.base_url, head.encode())
        assert answer.startswith(b"HTTP/1.1 413"), (path, answer)
        assert b"problems/body-too-large" in answer


def _raw(base_url: str, request: bytes) -> tuple[bytes, float]:
    """Send `request` as is; read the answer's head and body (JSON); return it and the wait."""
    port = int(base_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request)
        started = time.monotonic()
        answer = b""
        while b"\r\n\r\n" not in answer or b"}" not in answer.split(b"\r\n\r\n", 1)[1]:
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
        return answer, time.monotonic() - started


@pytest.fixture(scope="module")
def impatient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    timeouts = {"body_read_timeout_s": 1.0, "header_read_timeout_s": 1.0}
    with private_stack(tmp_path_factory, "impatient", settings=timeouts) as (api, _console):
        yield api


def test_a_body_that_stops_arriving_is_answered_408(impatient: Api) -> None:
    org = impatient.new_org()
    answer, waited = _raw(
        impatient.base_url,
        (
            "POST /v1/members HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {org.tokens['owner']}\r\n"
            "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
            '{"email": "sl'
        ).encode(),
    )
    assert answer.startswith(b"HTTP/1.1 408"), answer
    assert b"problems/body-timeout" in answer
    assert 0.9 < waited < 10, waited
    assert not any(e.startswith("sl") for e in _emails(org))


def _emails(org: Org) -> list[str]:
    r = org.owner.get("/v1/members")
    assert r.status_code == 200, r.text
    return [m["email"] for m in r.json()]


def test_a_connection_that_trickles_its_headers_is_closed(impatient: Api) -> None:
    """Slowloris: the request head never completes; the server closes the connection after the
    header deadline instead of holding it open, and serves the next client as usual."""
    port = int(impatient.base_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        started = time.monotonic()
        closed = b""
        try:
            while chunk := sock.recv(4096):
                closed += chunk
        except TimeoutError:
            pytest.fail("the connection stayed open for 10 s")
        waited = time.monotonic() - started
    assert closed == b"" and 0.9 < waited < 5, (closed, waited)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:  # a quick client
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")
