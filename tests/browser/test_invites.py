"""A1 in the console, by invite link: an owner invites (email + role); the link, opened in
another browser, accepts and signs its holder in as a member with that role (their token shown
once); the link then answers a clear page, not a second member. The last owner cannot be
removed."""

from __future__ import annotations

from playwright.sync_api import Browser, expect

from tests.browser.conftest import Console, describe
from tests.e2e.conftest import Api, Org


def test_an_invite_link_signs_its_holder_in_once_with_the_invited_role(
    console: Console, browser: Browser, stack: Api, org: Org
) -> None:
    p = console.sign_in(org.tokens["owner"])
    p.get_by_role("navigation").get_by_role("link", name="Settings → Members").click()
    form = p.locator("form", has=p.get_by_role("heading", name="Invite by link"))
    form.get_by_label("Email to invite").fill("invited@example.com")
    form.get_by_label("Role of the invited member").select_option("auditor")
    form.get_by_role("button", name="Create invite link").click()
    link = p.get_by_label("Invite link for invited@example.com").input_value()
    assert "/invite/tni_" in link
    expect(p.locator('tr[data-invite="invited@example.com"]')).to_have_count(1)
    critical = console.axe()
    assert not critical, describe(critical)
    p.goto("/settings/members")
    assert link not in p.content()  # shown once
    # Only the hash is kept: the API's list never shows the secret either.
    listed = org.owner.get("/v1/members/invites")
    assert listed.status_code == 200 and "tni_" not in listed.text
    assert [i["email"] for i in listed.json()] == ["invited@example.com"]

    guest = Console(browser, stack.base_url)  # a new browser context: no owner's cookie
    try:
        g = guest.page
        g.goto(link)
        expect(g.get_by_role("heading", name="Join as auditor")).to_be_visible()
        g.get_by_role("button", name="Accept invitation").click()
        expect(
            g.get_by_role("heading", name="You are signed in as invited@example.com (auditor)")
        ).to_be_visible()
        token = g.get_by_label("Your member token").input_value()
        assert token.startswith("tnt_")
        me = stack.client(token).get("/v1/me").json()
        assert (me["email"], me["role"]) == ("invited@example.com", "auditor")
        g.goto("/")
        nav = g.get_by_role("navigation")
        expect(nav.get_by_role("link", name="Audit")).to_have_count(1)  # signed in as auditor
        expect(nav.get_by_role("link", name="Settings → Members")).to_have_count(0)
        refused = g.goto("/settings/members")
        assert refused is not None and refused.status == 403  # owner-only
        assert {m["email"]: m["role"] for m in org.owner.get("/v1/members").json()}[
            "invited@example.com"
        ] == "auditor"

        again = Console(browser, stack.base_url)  # the link, reused in yet another browser
        try:
            r = again.page.goto(link)
            assert r is not None and r.status == 410
            expect(
                again.page.get_by_role("heading", name="This invitation no longer works")
            ).to_be_visible()
            expect(again.page.get_by_role("alert")).to_contain_text("invite-invalid")
            expect(again.page.get_by_role("button", name="Accept invitation")).to_have_count(0)
        finally:
            again.close()
        assert org.owner.get("/v1/members/invites").json() == []
        emails = [m["email"] for m in org.owner.get("/v1/members").json()]
        assert emails.count("invited@example.com") == 1
    finally:
        guest.close()


def test_a_revoked_invite_link_answers_a_clear_page_and_the_last_owner_stays(
    console: Console, stack: Api, org: Org
) -> None:
    made = org.owner.post(
        "/v1/members/invites", json={"email": "late@example.com", "role": "member"}
    )
    assert made.status_code == 201, made.text
    body = made.json()
    assert (
        org.member.post(  # owner-only
            "/v1/members/invites", json={"email": "x@example.com", "role": "owner"}
        ).status_code
        == 403
    )
    p = console.sign_in(org.tokens["owner"])
    p.goto("/settings/members")
    p.get_by_role("button", name="Revoke invitation of late@example.com").click()
    expect(p.locator('tr[data-invite="late@example.com"]')).to_have_count(0)
    assert org.owner.delete(f"/v1/members/invites/{body['id']}").status_code == 404

    r = p.goto(body["link"])
    assert r is not None and r.status == 410
    expect(p.get_by_role("alert")).to_contain_text("invite-invalid")

    p.goto("/settings/members")
    owner_email = org.owner.get("/v1/me").json()["email"]
    mine = p.locator(f'tr[data-member="{owner_email}"]')
    mine.get_by_role("button", name=f"Remove {owner_email}").click()
    expect(mine.get_by_role("alert")).to_contain_text("last-owner")
    assert org.owner.get("/v1/me").status_code == 200


def test_a_member_sees_their_token_s_expiry_and_replaces_it_staying_signed_in(
    console: Console, stack: Api, org: Org
) -> None:
    made = org.owner.post(
        "/v1/members", json={"email": "own@example.com", "role": "finance", "expires_in_days": 5}
    ).json()
    p = console.sign_in(made["token"])
    p.get_by_role("link", name="Your token").click()
    expect(p.locator("[data-own-expires]")).to_have_text(made["token_expires_at"])
    p.get_by_role("button", name="Replace my token").click()
    new = p.get_by_label("Your new token").input_value()
    assert new.startswith("tnt_") and new != made["token"]
    assert stack.client(made["token"]).get("/v1/me").status_code == 401
    me = stack.client(new).get("/v1/me").json()
    assert (me["email"], me["role"]) == ("own@example.com", "finance")
    p.goto("/settings/token")  # the session moved to the new token
    expect(p.locator("[data-own-expires]")).to_have_text(made["token_expires_at"])
    expect(p.get_by_role("heading", name="Your token was replaced")).to_have_count(0)


def test_zz_an_expired_invite_link_answers_a_clear_page_and_makes_no_member(
    console: Console, stack: Api, org: Org
) -> None:
    """Last in this module: it moves the stack's (sandbox) clock two days on."""
    made = org.owner.post(
        "/v1/members/invites",
        json={"email": "slow@example.com", "role": "member", "expires_in_days": 1},
    ).json()
    p = console.page
    p.goto(made["link"])
    expect(p.get_by_role("button", name="Accept invitation")).to_be_visible()
    stack.sandbox.advance_clock(2 * 86400)
    p.get_by_role("button", name="Accept invitation").click()
    expect(p.get_by_role("alert")).to_contain_text("invite-invalid")
    expect(p.get_by_role("alert")).to_contain_text("expired")
    r = p.goto(made["link"])
    assert r is not None and r.status == 410
    assert "slow@example.com" not in [m["email"] for m in org.owner.get("/v1/members").json()]
    assert org.owner.get("/v1/members/invites").json() == []  # an expired one is not open
