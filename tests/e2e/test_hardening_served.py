"""Security round three against `tensorant serve --sandbox` as a user starts it: a
process of its own, the probe's requests sent to it over HTTP from the loopback address, as the
probe sent them."""

from __future__ import annotations

import asyncio
import re
import socket
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.e2e.flows import until
from tests.e2e.served import Served, serve

LIMIT = 3


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    path: Path = tmp_path_factory.mktemp("served")
    with serve(path, auth_failure_limit=str(LIMIT), failure_window_s="3") as process:
        process.wait_healthy()
        process.owner_token()
        yield process


def _problem(r: httpx.Response, status: int, slug: str) -> None:
    assert r.status_code == status, r.text
    assert r.json()["type"] == f"https://tensorant.dev/problems/{slug}", r.text


# ---------------------------------------------------------------- M2: each body shape its cap
MIB = 1024 * 1024


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _answer(sock: socket.socket) -> bytes:
    answer = b""
    while b"\r\n\r\n" not in answer or b"}" not in answer.split(b"\r\n\r\n", 1)[1]:
        chunk = sock.recv(4096)
        if not chunk:
            break
        answer += chunk
    return answer


def test_m2_a_400_mib_json_dataset_body_is_refused_413_before_it_is_read(served: Served) -> None:
    token = served.owner_token()
    path = f"/v1/projects/{uuid.uuid4()}/datasets"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n"
        "Content-Type: application/json\r\n"
    )
    before = _rss_bytes(served.proc.pid)
    # Declared: answered from the length alone, before a byte of the body is sent.
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        sock.sendall(f"{head}Content-Length: {400 * MIB}\r\n\r\n".encode())
        answer = _answer(sock)
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert b"problems/body-too-large" in answer and f"{MIB}".encode() in answer
    # Undeclared (chunked): counted as it arrives and refused past 1 MiB; the 400 MiB are never
    # all taken in, let alone held.
    sent = 0
    with socket.create_connection(("127.0.0.1", served.port), timeout=30) as sock:
        sock.sendall(f"{head}Transfer-Encoding: chunked\r\n\r\n".encode())
        chunk = b'{"name": "' + b"x" * (MIB - 10)
        try:
            while sent < 400 * MIB:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
                chunk = b"x" * MIB
        except OSError:  # the server answered and closed: it stopped reading
            pass
        answer = _answer(sock)
    assert answer.startswith(b"HTTP/1.1 413"), answer
    assert sent < 400 * MIB, "the server read the whole body"
    grown = _rss_bytes(served.proc.pid) - before
    assert grown < 64 * MIB, f"the server grew by {grown / MIB:.0f} MiB"
    # A JSON body under the cap on the same route is read as usual (here: no such project).
    r = httpx.post(
        served.base_url + path,
        json={"name": "d", "version": "1", "object_key": "datasets/x/d.jsonl"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert r.status_code in (404, 409, 422), r.text


# ---------------------------------------------------------------- N4: sessions only at sign-in
CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def _signed_in(served: Served, token: str) -> httpx.Client:
    """The console's sign-in form, posted as a browser posts it (its CSRF token and cookie)."""
    http = httpx.Client(base_url=served.base_url, timeout=30, follow_redirects=False)
    page = http.get("/")
    assert "tensorant_session" not in page.cookies  # nothing kept for a signed-out visitor
    csrf = CSRF.search(page.text)
    assert csrf, page.text[:300]
    r = http.post(
        "/signin",
        data={"token": token, "csrf_token": csrf.group(1)},
        headers={"Origin": served.base_url},
    )
    assert r.status_code == 303, r.text
    assert http.cookies.get("tensorant_session")
    return http


def _is_signed_in(http: httpx.Client) -> bool:
    r = http.get("/")
    return r.status_code == 200 and "Sign out" in r.text and "Member token" not in r.text


def test_n4_20000_anonymous_visits_leave_a_signed_in_session_working(served: Served) -> None:
    console = _signed_in(served, served.owner_token())
    assert _is_signed_in(console)

    async def visits(count: int, connections: int = 16) -> list[int]:
        """`count` cookie-less GET / over `connections` kept-alive connections, each sending
        its share at once (pipelined): the client's own CPU stays small beside the server's."""
        request = f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{served.port}\r\n\r\n".encode()

        async def connection(share: int) -> list[int]:
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            writer.write(request * share)
            await writer.drain()
            codes = []
            for _ in range(share):
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                codes.append(int(head.split(" ", 2)[1]))
                assert "tensorant_session" not in head  # nothing kept for a visitor
                length = re.search(r"(?im)^content-length: *(\d+)", head)
                assert length, head
                await reader.readexactly(int(length.group(1)))
            writer.close()
            return codes

        shares = [count // connections + (i < count % connections) for i in range(connections)]
        done = await asyncio.gather(*(connection(n) for n in shares))
        return [code for codes in done for code in codes]

    # A loop of its own, on a thread of its own: this process may run one already (Playwright).
    with ThreadPoolExecutor(1) as pool:
        codes = pool.submit(asyncio.run, visits(20_000)).result()
    assert len(codes) == 20_000 and set(codes) == {200}, set(codes)
    assert _is_signed_in(console)
    # A form without the signed cookie's own token is refused (CSRF), signed out or in.
    forged = httpx.post(
        served.base_url + "/signin",
        data={"token": served.owner_token(), "csrf_token": "x.y"},
        headers={"Origin": served.base_url},
        cookies={"tensorant_csrf": "x.y"},
    )
    assert forged.status_code == 403, forged.text
    assert "tensorant_session" not in forged.headers.get("set-cookie", "")
    console.close()


# ---------------------------------------------------------------- N7: X-Forwarded-For (last: it
# leaves the loopback address slowed for the window)
def test_n7_last_rotating_x_forwarded_for_from_an_untrusted_peer_is_throttled(
    served: Served,
) -> None:
    with httpx.Client(base_url=served.base_url, timeout=30) as http:
        bad = {"Authorization": "Bearer tnt_" + "0" * 43}
        for i in range(LIMIT):
            forged = {**bad, "X-Forwarded-For": f"203.0.113.{i + 1}"}
            _problem(http.get("/v1/me", headers=forged), 401, "unauthenticated")
        forged = {**bad, "X-Forwarded-For": f"198.51.100.{uuid.uuid4().int % 250 + 1}"}
        r = http.get("/v1/me", headers=forged)
        _problem(r, 429, "too-many-failures")
        assert int(r.headers["Retry-After"]) >= 1
        # The console's sign-in counts on the same key: a fresh forged address does not help.
        page = http.get("/", headers={"X-Forwarded-For": "192.0.2.77"})
        assert page.status_code == 200
        # The window passes: the owner reads again (no other test finds the address slowed).
        owner = {"Authorization": f"Bearer {served.owner_token()}"}
        until(lambda: http.get("/v1/me", headers=owner).status_code == 200, timeout=10)
