"""O4: every problem type the code can answer has an entry in docs/problems.md, with what
happened and what to do; the README's short list of common ones says what that page says."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("domain", "application", "projections", "adapters", "api")
FIRST_CELL = re.compile(r"^\| ([^|]*\(\d{3}[^|]*\)) \|", re.MULTILINE)


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


def problem_rows(text: str) -> dict[str, list[str]]:
    """slug -> the cells of its row (type and status, what happened, what to do)."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        if FIRST_CELL.match(line):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            for slug in re.findall(r"`([a-z0-9-]+)`", cells[0]):
                rows[slug] = cells
    return rows


def test_every_problem_type_has_a_row_with_what_happened_and_what_to_do() -> None:
    rows = problem_rows((ROOT / "docs" / "problems.md").read_text())
    slugs = problem_slugs()
    assert len(slugs) > 30
    assert slugs - rows.keys() == set(), "add docs/problems.md rows for these problem types"
    thin = {slug for slug in slugs if len(rows[slug]) != 3 or not all(rows[slug][1:])}
    assert thin == set(), "each row says what happened and what to do"


def test_the_readmes_common_problems_are_the_documents_words() -> None:
    readme = (ROOT / "README.md").read_text().split("## Common problems", 1)[1]
    shown = problem_rows(readme)
    documented = problem_rows((ROOT / "docs" / "problems.md").read_text())
    assert len(shown) >= 5
    differ = {slug for slug, cells in shown.items() if documented.get(slug) != cells}
    assert differ == set(), "the README's row must be docs/problems.md's"
