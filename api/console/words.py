"""People's words on the console's pages: actors by their email, not `user:<uuid>`, and times
as a `<time>` element (UTC, to the second, without scripts; console.js shows it in the reader's
own time zone, relative, with the exact local time on hover)."""

from __future__ import annotations

from datetime import UTC
from typing import Any

from jinja2 import Environment
from markupsafe import Markup, escape

from domain.times import parse_iso
from projections.store.base import ViewStore
from projections.views.identity import ROSTER, roster_key

# Actors that are not members (the event log's own names).
NAMED = {"system": "Tensorant", "trainer": "the trainer", "worker": "Tensorant"}


def people(views: ViewStore, org_id: str) -> dict[str, str]:
    """`user:<id>` -> email, for the organization's members now."""
    return {
        f"user:{doc['user_id']}": str(doc["email"])
        for _, doc in views.list(ROSTER, org_id, roster_key(""))
        if "user_id" in doc and "email" in doc
    }


def who(actor: str, known: dict[str, str]) -> str:
    """An actor as people read it: a member's email, "a removed member", or Tensorant."""
    if actor in known:
        return known[actor]
    if actor.startswith("user:"):
        return "a removed member"
    return NAMED.get(actor, actor)


def when(value: Any) -> Markup:
    """`<time datetime=...>` with the UTC time to the second (no microseconds)."""
    if not value:
        return Markup("—")
    try:
        at = parse_iso(str(value)).astimezone(UTC)
    except ValueError:
        return escape(str(value))
    exact = at.strftime("%Y-%m-%d %H:%M:%S UTC")
    shown = f"{at.day} {at:%b %Y}, {at:%H:%M:%S} UTC"
    return Markup(  # noqa: S704 - every part is escaped
        f'<time datetime="{escape(at.isoformat())}" title="{escape(exact)}">{escape(shown)}</time>'
    )


def install(env: Environment) -> None:
    env.filters["when"] = when
    env.filters["who"] = who
