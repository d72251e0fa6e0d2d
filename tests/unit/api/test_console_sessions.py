"""N4: the console's session store holds signed-in sessions only, bounded per member and in
all; it evicts only expired sessions or the same member's oldest."""

from __future__ import annotations

import time

import pytest

from api.console import sessions as s
from api.console.sessions import SessionsFull, SessionStore


def test_a_signed_out_visitor_is_kept_nowhere_and_their_csrf_cookie_is_signed() -> None:
    store = SessionStore()
    visitor, fresh = store.signed_out(None)
    assert fresh and visitor.id == "" and len(store) == 0
    again, fresh = store.signed_out(visitor.csrf)
    assert not fresh and again.csrf == visitor.csrf
    nonce = visitor.csrf.rpartition(".")[0]
    for forged in (f"{nonce}.{'0' * 64}", "x.y", "", "no-dot"):
        assert not store.valid_csrf(forged)
        assert store.signed_out(forged)[1]  # a forged cookie is replaced, never accepted
    assert not SessionStore().valid_csrf(visitor.csrf)  # another process's key


def test_a_member_s_new_session_evicts_only_their_own_oldest() -> None:
    store = SessionStore(max_sessions=100, max_per_user=3)
    other = store.new("other")
    mine = [store.new("me") for _ in range(5)]
    assert [store.get(x.id) is not None for x in mine] == [False, False, True, True, True]
    assert store.get(other.id) is other and len(store) == 4


def test_a_full_store_drops_expired_sessions_and_else_refuses_rather_than_evict() -> None:
    store = SessionStore(max_sessions=3, max_per_user=3)
    kept = [store.new(f"user-{i}") for i in range(3)]
    with pytest.raises(SessionsFull):
        store.new("late")
    assert all(store.get(x.id) is x for x in kept)
    kept[0].created = time.monotonic() - s.TTL_SECONDS - 1  # expired
    late = store.new("late")
    assert store.get(late.id) is late and store.get(kept[0].id) is None
    store.drop(late.id)
    assert store.get(late.id) is None and len(store) == 2
