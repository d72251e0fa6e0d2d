"""A console session resolves its member as a bearer token does (members index, then
the roster): a role change shows on the next page, a removed member or an expired token signs
the session out — the same check, at the same cost, for the bench's console page and the API."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

from api.console.sessions import Session
from api.console.web import caller_of
from projections.store.base import INDEX
from projections.store.urls import open_view_store
from projections.views.identity import MEMBERS, ROSTER, roster_key
from tests.fakes import FixedClock

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def test_a_session_sees_the_roster_as_it_is_now(tmp_path: Path) -> None:
    views = open_view_store(f"sqlite:///{tmp_path / 'v.db'}")
    clock = FixedClock(T0)
    backend = cast(Any, SimpleNamespace(views=views, clock=clock))
    added = {"user_id": "u1", "email": "a@x.test", "organization_id": "org", "role": "owner"}
    roster = {"user_id": "u1", "email": "a@x.test", "role": "owner", "token_expires_at": None}

    def write(member: dict[str, Any] | None) -> None:
        with views.batch(MEMBERS) as b:
            b.put(INDEX, "hash1", added)
        with views.batch(ROSTER) as b:
            if member is None:
                b.delete("org", roster_key("u1"))
            else:
                b.put("org", roster_key("u1"), member)

    session = Session("s", "c", "hash1")
    write(roster)
    caller = caller_of(backend, session)
    assert caller is not None
    assert (caller.user_id, caller.org_id, caller.role) == ("u1", "org", "owner")

    write({**roster, "role": "viewer"})  # a role change applies to the next page
    changed = caller_of(backend, session)
    assert changed is not None
    assert changed.role == "viewer"

    write({**roster, "token_expires_at": (T0 + timedelta(hours=1)).isoformat()})
    assert caller_of(backend, session) is not None
    clock.advance(2 * 3600)
    assert caller_of(backend, session) is None  # expired: signed out

    write(None)  # removed from the roster
    assert caller_of(backend, session) is None
    assert caller_of(backend, Session("s2", "c", "unknown")) is None
