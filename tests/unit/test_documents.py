"""The documents stay a user's documents and say what the code does: every setting has a row in
docs/configuration.md with the code's default, the README is short with no dated timings, and
bench/README.md is one current table, not a notebook."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic.fields import FieldInfo

from entrypoints.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
DATED = re.compile(r"[0-9]+ min [0-9]+ s|20[0-9]{2}-[0-9]{2}-[0-9]{2} [0-9]{2}:[0-9]{2}")


def documented_settings() -> dict[str, str]:
    """NAME -> its default cell, from the rows of docs/configuration.md's tables (a row may
    name several settings, `A` / `B`, with as many defaults)."""
    found: dict[str, str] = {}
    for line in (ROOT / "docs" / "configuration.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("| `") or len(cells) != 3:
            continue
        names = re.findall(r"`([A-Z0-9_]+)`", cells[0])
        defaults = [d.strip() for d in cells[1].split(" / ")]
        for i, name in enumerate(names):
            found[name] = defaults[i] if len(defaults) == len(names) else cells[1]
    return found


def plain_default(field: FieldInfo) -> str | None:
    """The default as a row writes it, for a number or a text; None for anything else."""
    value = field.default
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def test_every_setting_has_a_row_with_the_codes_default() -> None:
    rows = documented_settings()
    fields = {name.upper(): field for name, field in Settings.model_fields.items()}
    assert len(fields) > 30
    assert fields.keys() - rows.keys() == set(), "add docs/configuration.md rows for these"
    assert rows.keys() - fields.keys() == set(), "these rows name no setting"
    wrong = {
        name: (rows[name], default)
        for name, field in fields.items()
        if (default := plain_default(field)) is not None and rows[name] != default
    }
    assert wrong == {}, "the documented default is not the code's"


def test_the_readme_is_short_gives_the_two_commands_and_carries_no_dated_timings() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) < 150
    assert "uv run tensorant demo" in readme
    assert "uv run pytest" in readme
    assert DATED.findall(readme) == []


def test_the_benchmarks_readme_is_one_current_table() -> None:
    bench = (ROOT / "bench" / "README.md").read_text()
    assert len(bench.splitlines()) < 300
    assert len(DATED.findall(bench)) <= 1  # the table's one measurement time, at most
