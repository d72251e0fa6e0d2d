"""A scripted RunPod over loopback: it answers exactly what a test scripts (status, body,
headers, delay), which the sandbox cannot always do (an echoed key, a lifecycle call that fails
after taking effect, a timeout, a probe answer RunPod never documented)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

KEY = "rpa_STUBSECRETKEY0123456789ABCDEFGHIJKLMNOPQRS"
HTML_502 = "<html><body><h1>502 Bad Gateway</h1></body></html>"


@dataclass
class Answer:
    status: int = 200
    body: Any = None  # dict/list -> JSON, str -> raw text
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def data(payload: dict[str, Any]) -> Answer:
    return Answer(200, {"data": payload})


def gql_error(message: str, status: int = 200) -> Answer:
    return Answer(status, {"errors": [{"message": message}]})


def problem(status: int, detail: str) -> Answer:
    return Answer(status, {"title": "Refused", "status": status, "detail": detail})


def raw_pod(status: str = "RUNNING", runtime: bool = True, **extra: Any) -> dict[str, Any]:
    """A Pod as RunPod's GraphQL returns it."""
    pod = {
        "id": "pod1",
        "name": "run-1",
        "desiredStatus": status,
        "costPerHr": 0.34,
        "gpuCount": 1,
        "containerDiskInGb": 20,
        "volumeInGb": 0,
        "uptimeSeconds": 5,
        "networkVolumeId": "nv1",
        "env": ["K=v"],
        "runtime": {"ports": []} if runtime else None,
        "machine": {
            "podHostId": "pod1-abcdef12",
            "dataCenterId": "EU-RO-1",
            "gpuDisplayName": "RTX 4090",
            "gpuTypeId": "NVIDIA GeForce RTX 4090",
        },
    }
    pod.update(extra)
    return pod


def assert_no_key(exc: BaseException) -> None:
    assert KEY not in str(exc)
    assert KEY[-12:] not in str(exc)
    assert KEY not in repr(getattr(exc, "extra", {}))


class StubRunPod:
    """Routes by a substring of the GraphQL query (or the path); answers are consumed in order,
    the last one repeating."""

    def __init__(self) -> None:
        self.routes: list[tuple[str, list[Answer]]] = []
        self.requests: list[dict[str, Any]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args: Any) -> None:
                pass

            def _answer(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                stub.requests.append(
                    {
                        "path": self.path,
                        "headers": dict(self.headers),
                        "body": raw,
                        "method": self.command,
                    }
                )
                answer = stub.next_answer(f"{self.command} {self.path} {raw.decode()}")
                if answer.delay_s:
                    threading.Event().wait(answer.delay_s)
                body = answer.body if isinstance(answer.body, str) else json.dumps(answer.body)
                try:
                    self.send_response(answer.status)
                    for k, v in answer.headers.items():
                        self.send_header(k, v)
                    self.send_header("Content-Length", str(len(body.encode())))
                    self.end_headers()
                    self.wfile.write(body.encode())
                except (BrokenPipeError, ConnectionResetError):
                    pass

            do_POST = _answer
            do_GET = _answer
            do_PATCH = _answer
            do_DELETE = _answer

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def on(self, needle: str, *answers: Answer) -> StubRunPod:
        self.routes.append((needle, list(answers)))
        return self

    def next_answer(self, text: str) -> Answer:
        for needle, answers in self.routes:
            if needle in text and answers:
                return answers.pop(0) if len(answers) > 1 else answers[0]
        return gql_error(f"stub has no answer for: {text[:80]}", 400)

    def count(self, needle: str) -> int:
        return sum(
            needle in f"{r['method']} {r['path']} {r['body'].decode()}" for r in self.requests
        )
