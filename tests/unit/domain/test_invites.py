"""A1 invite links on the Organization aggregate: single-use, expiring, refused alike when used,
revoked or unknown; the accepted member gets the invited role."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from domain.errors import NotFound
from domain.organization import InvalidOrganization, InviteInvalid, MemberExists, Organization

AT = datetime(2026, 1, 1, tzinfo=UTC)


def _org() -> Organization:
    org = Organization.create("Acme", "own", "u", AT)
    org.add_member("owner-1", "owner@example.com", "owner", "h-owner", "u", AT)
    org.create_invite("i1", "ana@example.com", "auditor", "h-link", AT + timedelta(days=7), "u", AT)
    return org


def test_accepting_adds_the_member_with_the_invited_role_and_uses_the_link_up() -> None:
    org = _org()
    assert org.accept_invite("h-link", "ana-1", "h-ana", AT + timedelta(days=1)) == "i1"
    assert org.members["ana-1"]["role"] == "auditor"
    assert org.open_invites() == []
    with pytest.raises(InviteInvalid):
        org.accept_invite("h-link", "ana-2", "h-ana2", AT + timedelta(days=1))
    assert "ana-2" not in org.members


def test_an_expired_revoked_or_unknown_link_is_refused() -> None:
    org = _org()
    with pytest.raises(InviteInvalid, match="expired"):
        org.accept_invite("h-link", "ana-1", "h-ana", AT + timedelta(days=7))
    with pytest.raises(InviteInvalid):
        org.accept_invite("h-other", "ana-1", "h-ana", AT)
    org.revoke_invite("i1", "u", AT)
    with pytest.raises(InviteInvalid):
        org.accept_invite("h-link", "ana-1", "h-ana", AT)
    with pytest.raises(NotFound):
        org.revoke_invite("i1", "u", AT)
    assert set(org.members) == {"owner-1"}


def test_an_invite_needs_a_role_an_email_not_yet_a_member_and_an_expiry_within_30_days() -> None:
    org = _org()
    with pytest.raises(InvalidOrganization):
        org.create_invite("i2", "b@example.com", "king", "h2", AT + timedelta(days=1), "u", AT)
    with pytest.raises(MemberExists):
        org.create_invite("i2", "OWNER@example.com", "member", "h2", AT + timedelta(1), "u", AT)
    with pytest.raises(InvalidOrganization):
        org.create_invite("i2", "b@example.com", "member", "h2", AT + timedelta(31), "u", AT)


def test_an_organization_replayed_from_before_invite_links_has_none_open() -> None:
    org = Organization.create("Acme", "own", "u", AT)
    del org.__dict__["invites"]  # as an aggregate whose creation predates invite links
    assert org.open_invites() == []
    org.create_invite("i1", "a@example.com", "member", "h", AT + timedelta(days=1), "u", AT)
    assert [i["id"] for i in org.open_invites()] == ["i1"]
