"""Log streams cannot starve the server.

`tensorant serve --sandbox` runs in a process of its own; this test is the load generator. One
organization holds 200 idle log streams (raw sockets: a stream costs the client nothing) while
another organization's `GET /v1/runs` is timed; then the caps answer 429, closing the streams
frees their slots within a second, and SIGTERM with streams open exits within the grace period.
"""

from __future__ import annotations

import re
import signal
import socket
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from runpod_sandbox.seed import seeded_credentials
from tests.e2e.conftest import volume_spec
from tests.e2e.flows import project_with_dataset, run_config
from tests.e2e.served import Served, serve

pytestmark = pytest.mark.slow

PER_CALLER, PER_ORG, TOTAL = 50, 200, 201
GRACE_S = 5


class _Clients:
    """The owner's client stands in for every role the flow helpers use."""

    def __init__(self, client: httpx.Client) -> None:
        self.owner = self.member = self.auditor = client


def _client(srv: Served, token: str) -> httpx.Client:
    return httpx.Client(
        base_url=srv.base_url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    )


def _draft_run(srv: Served, api: httpx.Client) -> str:
    """A draft run: it prints nothing and never ends, so a stream on it idles."""
    creds = seeded_credentials(srv.sandbox_port)
    r = api.post("/v1/connections/runpod", json={"api_key": creds["api_key"]})
    assert r.status_code == 201, r.text
    assert api.put("/v1/storage", json=volume_spec(creds)).status_code == 200
    config = run_config(*project_with_dataset(_Clients(api)))  # type: ignore[arg-type]
    r = api.post("/v1/runs", json=config)
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _open_stream(srv: Served, token: str, run_id: str) -> tuple[socket.socket, int, bytes]:
    """GET the stream on a raw socket; return the socket, the status and the head read."""
    sock = socket.create_connection(("127.0.0.1", srv.port), timeout=30)
    sock.sendall(
        (
            f"GET /v1/runs/{run_id}/logs/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {token}\r\nAccept: text/event-stream\r\n\r\n"
        ).encode()
    )
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(4096)
        assert chunk, f"the server closed the stream: {head!r}"
        head += chunk
    status = int(head.split(b" ", 2)[1])
    if status != 200:  # a refusal: read its problem+json body too
        length = re.search(rb"content-length: (\d+)", head.lower())
        assert length, head
        end = head.index(b"\r\n\r\n") + 4 + int(length.group(1))
        while len(head) < end:
            head += sock.recv(4096)
    return sock, status, head


def _open_streams(srv: Served) -> float:
    text = httpx.get(f"{srv.base_url}/metrics", timeout=10).text
    found = re.search(r"^tensorant_open_streams (\S+)$", text, re.M)
    assert found, text
    return float(found.group(1))


def _p99_ms(api: httpx.Client, n: int = 300) -> tuple[float, float]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        r = api.get("/v1/runs")
        times.append((time.perf_counter() - t) * 1000)
        assert r.status_code == 200, r.text
    times.sort()
    return statistics.median(times), times[int(n * 0.99) - 1]


@contextmanager
def _closing(socks: list[socket.socket]) -> Iterator[list[socket.socket]]:
    try:
        yield socks
    finally:
        for s in socks:
            s.close()


def _member(api: httpx.Client, role: str) -> str:
    r = api.post(
        "/v1/members", json={"email": f"{role}-{time.monotonic_ns()}@a.example", "role": role}
    )
    assert r.status_code == 201, r.text
    token: str = r.json()["token"]
    return token


def test_idle_streams_leave_other_organizations_fast_and_end_on_sigterm(tmp_path: Path) -> None:
    with serve(
        tmp_path,
        stream_limit_per_caller=str(PER_CALLER),
        stream_limit_per_org=str(PER_ORG),
        stream_limit_total=str(TOTAL),
        shutdown_grace_s=str(GRACE_S),
    ) as srv:
        owner_a = srv.owner_token()
        srv.wait_healthy()
        org_b = srv.cli("admin", "create-org", "Other").strip().splitlines()[-1].strip()
        owner_b = re.findall(
            r"tnt_\S+", srv.cli("admin", "add-member", org_b, "b@b.example", "--role", "owner")
        )[-1]
        with _client(srv, owner_a) as a, _client(srv, owner_b) as b:
            run_a, run_b = _draft_run(srv, a), _draft_run(srv, b)
            # 200 streams from four callers of organization A (50 each, the per-caller cap).
            tokens = [owner_a] + [_member(a, role) for role in ("member", "auditor", "finance")]
            baseline = _p99_ms(b)
            with _closing([]) as socks:
                for token in tokens:
                    for _ in range(PER_CALLER):
                        sock, status, head = _open_stream(srv, token, run_a)
                        socks.append(sock)
                        assert status == 200, head
                time.sleep(1.5)  # fixed-sleep-ok: the streams' polling is the load measured
                assert _open_streams(srv) == PER_ORG
                loaded = _p99_ms(b)
                print(
                    f"GET /v1/runs of another organization: median/p99 {baseline[0]:.1f}/"
                    f"{baseline[1]:.1f} ms alone, {loaded[0]:.1f}/{loaded[1]:.1f} ms beside "
                    f"{PER_ORG} idle streams"
                )
                assert loaded[1] < 200, loaded

                # The caps: per caller, per organization, in total — each a 429 with Retry-After.
                refusals: list[dict[str, Any]] = []
                for token, run in ((owner_a, run_a), (_member(a, "member"), run_a)):
                    sock, status, head = _open_stream(srv, token, run)
                    sock.close()
                    assert status == 429, head
                    assert b"retry-after: 5" in head.lower(), head
                    refusals.append({"head": head})
                assert b"you have 50 streams open" in refusals[0]["head"]
                assert b"your organization has 200 streams open" in refusals[1]["head"]
                first_b, status, head = _open_stream(srv, owner_b, run_b)
                socks.append(first_b)
                assert status == 200, head  # another organization is not refused: 201 of 201
                sock, status, head = _open_stream(srv, owner_b, run_b)
                sock.close()
                assert status == 429, head
                assert b"problems/too-many-streams" in head and b"retry later" in head, head

                # Closing A's streams frees their slots within a second.
                for s in socks[:PER_ORG]:
                    s.close()
                closed_at = time.monotonic()
                while _open_streams(srv) > 1:
                    assert time.monotonic() - closed_at < 1.0, _open_streams(srv)
                    time.sleep(0.02)
                freed_in = time.monotonic() - closed_at

                # SIGTERM with streams open (B's one, and 20 of A's again): out within the grace.
                for _ in range(20):
                    sock, status, head = _open_stream(srv, owner_a, run_a)
                    socks.append(sock)
                    assert status == 200, head
                sent = time.monotonic()
                srv.proc.send_signal(signal.SIGTERM)
                srv.proc.wait(GRACE_S + 10)
                exited_in = time.monotonic() - sent
                print(
                    f"streams freed in {freed_in * 1000:.0f} ms; SIGTERM exit in {exited_in:.2f} s"
                )
                assert exited_in < GRACE_S, srv.output
                # The streams were ended by the server, not cut by the client.
                first_b.settimeout(5)
                assert _drain(first_b).endswith(b"0\r\n\r\n")


def _drain(sock: socket.socket) -> bytes:
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except (TimeoutError, ConnectionResetError):
            return data
        if not chunk:
            return data
        data += chunk
