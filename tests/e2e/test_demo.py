"""`tensorant demo` walks the first half of the guide and exits 0."""

from __future__ import annotations

from io import StringIO

from rich.console import Console

from api.demo import run_demo


def test_the_demo_walks_the_first_half_of_the_guide() -> None:
    out = StringIO()
    assert run_demo(Console(file=out, width=200)) == 0, out.getvalue()
    text = out.getvalue()
    assert text.count("✓") == 9
    assert "training half" in text
