"""O4: every problem type the code can answer has an entry in the README's "Common problems"."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("domain", "application", "projections", "adapters", "api")


def problem_slugs() -> set[str]:
    found: set[str] = set()
    for layer in LAYERS:
        for path in (ROOT / layer).rglob("*.py"):
            if "sandbox" in path.parts:
                continue  # RunPod's stand-in answers as RunPod does, not with our problems
            found |= set(re.findall(r'problem = "([a-z0-9-]+)"', path.read_text()))
            found |= set(
                re.findall(r'problem_response\(\s*\d+,\s*"([a-z0-9-]+)"', path.read_text())
            )
    return found


def test_every_problem_type_has_a_common_problems_entry() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Common problems", 1)[1]
    first_cells = re.findall(r"^\| ([^|]*\(\d{3}[^|]*\)) \|", section, re.MULTILINE)
    documented = {slug for cell in first_cells for slug in re.findall(r"`([a-z0-9-]+)`", cell)}
    slugs = problem_slugs()
    assert len(slugs) > 30
    assert slugs - documented == set(), "add README entries for these problem types"
