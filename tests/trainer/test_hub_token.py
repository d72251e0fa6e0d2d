"""C7 inside the Pod: a gated model's token is asked of the control plane with the run token
(GET /v1/trainer/runs/<id>/hub-token); without a callback URL, or when refused, the trainer fails
`base_model_unavailable` saying why, and never with the token in the detail."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.fixtures import TOKEN, make_workspace
from trainer.errors import TrainerFailure
from trainer.model import hub_token

SECRET = "hf_" + "S" * 34


@pytest.fixture
def control_plane() -> Iterator[tuple[str, list[tuple[str, str]]]]:
    """Answers the token to the run's own token only, as the control plane does."""
    asked: list[tuple[str, str]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            auth = self.headers.get("Authorization", "")
            asked.append((self.path, auth))
            ok = auth == f"Bearer {TOKEN}" and self.path == "/v1/trainer/runs/run-1/hub-token"
            body = json.dumps({"token": SECRET} if ok else {"type": "not-found"}).encode()
            self.send_response(200 if ok else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", asked
    server.shutdown()


def test_c7_the_token_is_asked_with_the_run_token(
    tiny_model: Path, tmp_path: Path, control_plane: tuple[str, list[tuple[str, str]]]
) -> None:
    url, asked = control_plane
    ws = make_workspace(tmp_path / "ws", tiny_model, callback_url=url)
    assert hub_token(ws.settings) == SECRET
    assert asked == [("/v1/trainer/runs/run-1/hub-token", f"Bearer {TOKEN}")]
    with pytest.raises(TrainerFailure) as refused:
        hub_token(replace(ws.settings, token="another-runs-token"))
    assert refused.value.reason == "base_model_unavailable"
    assert "404" in refused.value.detail and SECRET not in refused.value.detail


def test_c7_without_a_callback_url_a_gated_model_fails_with_what_to_set(
    tiny_model: Path, tmp_path: Path
) -> None:
    ws = make_workspace(tmp_path / "ws", tiny_model)
    with pytest.raises(TrainerFailure) as failed:
        hub_token(ws.settings)
    assert failed.value.reason == "base_model_unavailable"
    assert "TENSORANT_PUBLIC_URL" in failed.value.detail
