"""What every page's form does: read its fields as the API's JSON would carry them, run one
shared action (`api.actions`), and show a refusal next to the field or button it concerns."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from api.console.problems import Shown, shown
from api.console.web import Page
from domain.errors import TensorantError

Errors = dict[str, Shown]


def text(form: dict[str, Any], name: str) -> str:
    value = form.get(name, "")
    return value.strip() if isinstance(value, str) else ""


def count(value: str) -> int | str:
    """A form's digits as the integer the API's strict JSON body would carry (else the text,
    which the API's schema then refuses with its own words)."""
    return int(value) if value.isdigit() else value


def submit(p: Page, errors: Errors, key: str, command: Callable[[], object]) -> bool:
    """Run `command` (an action); a refusal is shown next to `key`. A recorded refusal (e.g.
    LaunchRejected) is made visible to the next read, as the API does."""
    try:
        command()
    except (TensorantError, ValidationError) as exc:
        position = getattr(exc, "position", 0)
        if position:
            p.backend.wait_for(position)
        errors[key] = shown(exc)
        return False
    return True


def status_of(errors: Errors) -> int:
    return max((e.status for e in errors.values()), default=200)
