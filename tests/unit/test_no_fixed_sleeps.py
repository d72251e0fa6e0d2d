"""No negative check waits a fixed time (docs/testing.md, "Negative checks").

A test that sleeps a fixed time and then asserts that something did not happen passes whenever
the machine is slow enough that the thing had not happened yet: it proves nothing. Such a test
waits instead for what would have happened (an event, a position the projector reached, a
sandbox record, a reconcile pass) and then asserts.

The rule, checked on the syntax tree of every test module: a `time.sleep(...)` or
`asyncio.sleep(...)` statement outside a loop (a loop that sleeps is polling for something)
must not be followed, in the same block, by an `assert` or a `pytest.raises`. A sleep whose
duration is itself what is tested (a rate limit's window passing, a lease expiring) says so on
its line with `# fixed-sleep-ok: <reason>`, and the reason is reviewed like code.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
MARK = "# fixed-sleep-ok:"


def _is_sleep(node: ast.stmt) -> bool:
    """`time.sleep(x)`, `sleep(x)`, `await asyncio.sleep(x)` as a statement of its own."""
    if not isinstance(node, ast.Expr):
        return False
    call = node.value.value if isinstance(node.value, ast.Await) else node.value
    if not isinstance(call, ast.Call):
        return False
    f = call.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return name == "sleep"


def _asserts(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Assert):
            return True
        if isinstance(sub, ast.Call):
            f = sub.func
            if isinstance(f, ast.Attribute) and f.attr == "raises":
                return True
    return False


def _blocks(stmt: ast.stmt) -> list[list[ast.stmt]]:
    """The statement lists nested directly in `stmt` (bodies, else, finally, handlers, cases)."""
    out = [getattr(stmt, f) for f in ("body", "orelse", "finalbody") if getattr(stmt, f, None)]
    out += [h.body for h in getattr(stmt, "handlers", [])]
    out += [c.body for c in getattr(stmt, "cases", [])]
    return out


def fixed_sleeps_before_asserts(source: str) -> list[int]:
    """Line numbers of fixed sleeps (outside loops, unmarked) that an assert follows in their
    function (later in the same block or after the blocks around it)."""
    lines = source.splitlines()
    found: list[int] = []

    def scan(body: list[ast.stmt], in_loop: bool, asserted_after: bool) -> None:
        for i, stmt in enumerate(body):
            later = asserted_after or any(_asserts(s) for s in body[i + 1 :])
            if _is_sleep(stmt):
                if not in_loop and later and MARK not in lines[stmt.lineno - 1]:
                    found.append(stmt.lineno)
                continue
            if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                scan(stmt.body, False, False)  # runs on its own, wherever it is defined
                continue
            loop = isinstance(stmt, ast.For | ast.AsyncFor | ast.While)
            for inner in _blocks(stmt):
                scan(inner, in_loop or loop, later)

    scan(ast.parse(source).body, False, False)
    return found


def test_no_test_sleeps_a_fixed_time_before_asserting() -> None:
    offenders = [
        f"{path.relative_to(TESTS.parent)}:{line}"
        for path in sorted(TESTS.rglob("*.py"))
        for line in fixed_sleeps_before_asserts(path.read_text())
    ]
    assert not offenders, (
        "a fixed sleep before an assert (wait for what would have happened instead, or mark a "
        f"sleep whose length is the subject with '{MARK} <reason>'): {offenders}"
    )


def test_the_rule_sees_a_sleep_then_a_negative_check_and_not_a_polling_loop() -> None:
    bad = (
        "import time\ndef test():\n    go()\n    time.sleep(1.5)\n    assert state() == 'running'\n"
    )
    assert fixed_sleeps_before_asserts(bad) == [4]
    nested = (
        "import asyncio\nasync def test():\n    with x:\n        await asyncio.sleep(1)\n"
        "        with pytest.raises(E):\n            f()\n"
    )
    assert fixed_sleeps_before_asserts(nested) == [4]
    polling = (
        "import time\ndef wait():\n    while not done():\n        time.sleep(0.1)\n"
        "    assert done()\n"
    )
    assert fixed_sleeps_before_asserts(polling) == []
    marked = (
        "import time\ndef test():\n    time.sleep(1.2)  # fixed-sleep-ok: the window passes\n"
        "    assert allowed()\n"
    )
    assert fixed_sleeps_before_asserts(marked) == []
    helper = "import time\ndef work():\n    time.sleep(0.2)\n    return 1\n"
    assert fixed_sleeps_before_asserts(helper) == []
