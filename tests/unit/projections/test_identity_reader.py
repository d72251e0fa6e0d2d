"""Resolving a token hash: the members index and the roster, read together."""

from __future__ import annotations

from pathlib import Path

from projections.store.base import INDEX
from projections.store.sqlite import SQLiteViewStore
from projections.views.identity import MEMBERS, ROSTER, member_and_roster, roster_key


def test_a_token_hash_gives_its_member_and_that_members_roster_document(tmp_path: Path) -> None:
    store = SQLiteViewStore(str(tmp_path / "views.db"))
    try:
        member = {"user_id": "u1", "email": "a@x.test", "organization_id": "o1", "role": "owner"}
        with store.batch(MEMBERS) as b:
            b.put(INDEX, "hash-1", member)
        with store.batch(ROSTER) as b:
            b.put("o1", roster_key("u1"), {"email": "a@x.test", "role": "viewer"})
            b.put("o2", roster_key("u1"), {"email": "a@x.test", "role": "owner"})
        assert member_and_roster(store, "hash-1") == (
            member,
            {"email": "a@x.test", "role": "viewer"},
        )
        assert member_and_roster(store, "hash-2") == (None, None)
        with store.batch(ROSTER) as b:
            b.delete("o1", roster_key("u1"))  # removed from the organization
        assert member_and_roster(store, "hash-1") == (member, None)
    finally:
        store.close()
