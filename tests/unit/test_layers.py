"""The layering of CONVENTIONS.md holds: import-linter's contracts pass (and can fail)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_linter_contracts_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, check=False)
    assert "Contracts: " in result.stdout, result.stdout + result.stderr
    assert result.returncode == 0, result.stdout + result.stderr


def test_domain_imports_only_the_stdlib_and_eventsourcing_domain() -> None:
    allowed_prefixes = ("domain", "eventsourcing.domain", "__future__")
    stdlib = set(sys.stdlib_module_names)
    for path in (ROOT / "domain").glob("*.py"):
        for line in path.read_text().splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] in ("import", "from") and not line.startswith(" "):
                module = words[1]
                top = module.split(".")[0]
                assert top in stdlib or module.startswith(allowed_prefixes), f"{path.name}: {line}"


def test_ruff_finds_nothing() -> None:
    ruff = Path(sys.executable).parent / "ruff"
    result = subprocess.run(
        [str(ruff), "check", "--quiet", "."], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_passes_over_the_code() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "domain",
            "application",
            "projections",
            "adapters",
            "api",
            "trainer",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr[-2000:]
