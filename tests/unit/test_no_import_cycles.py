"""No two modules of ours import each other, directly or in a loop (docs/architecture.md).

Every import counts: at module level, inside functions, and under `if TYPE_CHECKING:` (a cycle
that only type checking sees is still two modules that cannot be understood apart).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]


def our_packages() -> list[str]:
    """The packages the wheel ships (pyproject), so a new package is covered by itself."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages: list[str] = config["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    return packages


def strongly_connected(graph: dict[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative: every group of modules that reach each other."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    groups.append(group)
    return groups


def import_cycles() -> set[frozenset[str]]:
    g = grimp.build_graph(*our_packages())
    graph = {m: set(g.find_modules_directly_imported_by(m)) for m in g.modules}
    return {
        frozenset(group)
        for group in strongly_connected(graph)
        if len(group) > 1 or any(m in graph[m] for m in group)
    }


def test_the_cycle_finder_finds_a_loop_of_three_and_a_self_import() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert sorted(sorted(g) for g in strongly_connected(graph) if len(g) > 1) == [["a", "b", "c"]]


def test_no_modules_of_ours_import_each_other_directly_or_in_a_loop() -> None:
    cycles = import_cycles()
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(sorted(c)) for c in cycles)


def test_every_package_of_ours_is_read() -> None:
    modules = grimp.build_graph(*our_packages()).modules
    for package in our_packages():
        assert package in modules
    assert {"entrypoints.cli", "projections.views.runs", "application.reactor"} <= modules
