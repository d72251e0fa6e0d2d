"""The RunPod algorithm exists once. The wires only translate (neither
imports the other nor the algorithm), and RunPodCompute knows no wire by name: the factory
composes them."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "adapters" / "runpod"
WIRES = {"adapters.runpod.graphql_wire", "adapters.runpod.rest_wire"}


def imports(module: str) -> set[str]:
    tree = ast.parse((PACKAGE / f"{module.rsplit('.', 1)[1]}.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_the_wires_import_neither_each_other_nor_the_algorithm() -> None:
    for wire in WIRES:
        assert not imports(wire) & (WIRES | {"adapters.runpod.compute"}), wire


def test_the_algorithm_knows_no_wire_and_only_the_factory_composes_them() -> None:
    assert not imports("adapters.runpod.compute") & WIRES
    assert imports("adapters.runpod.factory") >= WIRES
    for path in PACKAGE.glob("*.py"):
        module = f"adapters.runpod.{path.stem}"
        if module not in ("adapters.runpod.factory", "adapters.runpod.__init__"):
            assert not imports(module) & WIRES, module
