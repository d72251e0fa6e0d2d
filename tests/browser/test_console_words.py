"""The console's words: each "what to do" it shows is docs/problems.md's text, and
`serve --sandbox` prints where the console is and how to sign in."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from api.console.problems import WHAT_TO_DO
from entrypoints import processes
from entrypoints.server import Server
from entrypoints.settings import Settings
from tests.e2e.served import free_port

PROBLEMS = Path(__file__).resolve().parents[2] / "docs" / "problems.md"


def test_every_hint_is_the_documents_words_for_that_problem() -> None:
    rows: dict[str, str] = {}
    for line in PROBLEMS.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3:
            for slug in re.findall(r"`([a-z0-9-]+)`", cells[0]):
                rows[slug] = cells[2]
    missing = {slug: hint for slug, hint in WHAT_TO_DO.items() if hint not in rows.get(slug, "")}
    assert not missing, missing


def test_serve_with_the_sandbox_prints_the_console_address_and_how_to_sign_in(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    served: list[dict[str, Any]] = []
    monkeypatch.setattr(
        Server, "run", lambda self, sockets=None: served.append({"port": self.config.port})
    )
    sandbox_port = free_port()
    out = io.StringIO()
    settings = Settings(data_dir=tmp_path)
    processes.serve(settings, "127.0.0.1", 8765, sandbox_port, Console(file=out, width=300))
    text = out.getvalue()
    assert served and served[0]["port"] == 8765
    assert "Web console: http://127.0.0.1:8765/" in text
    assert "Owner token (shown once)" in text
    assert "sign in by pasting the owner token above once" in text
