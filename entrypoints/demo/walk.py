"""How the demo walks: each step calls the HTTP API as a client would and checks the contract."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from rich.console import Console

PROBLEMS = "https://tensorant.dev/problems/"


class StepFailed(Exception):
    """A step did not behave as the guide says."""


def expect(response: httpx.Response, status: int, problem: str | None = None) -> dict[str, Any]:
    if response.status_code != status:
        raise StepFailed(f"expected {status}, got {response.status_code}: {response.text[:200]}")
    if problem is not None and response.json().get("type") != PROBLEMS + problem:
        raise StepFailed(f"expected problem {problem}, got {response.json().get('type')}")
    if not response.content:
        return {}
    body = response.json()
    return body if isinstance(body, dict) else {"items": body}


@dataclass
class Walk:
    console: Console
    passed: int = 0
    failed: list[str] = field(default_factory=list)

    def step(self, title: str, run: Callable[[], str]) -> None:
        try:
            result = run()
        except (StepFailed, httpx.HTTPError, KeyError, ValueError) as e:
            self.failed.append(title)
            self.console.print(f"[red]✗[/red] {title}: [red]{e}[/red]")
            return
        self.passed += 1
        self.console.print(f"[green]✓[/green] {title}: {result}")
