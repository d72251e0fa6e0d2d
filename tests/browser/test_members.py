"""A1, A2 in the console: an owner adds a member (the token shown once works), changes a role and
removes a member, through the same actions as /v1/members; the last owner stays; other roles see
no Members page and a direct visit is refused."""

from __future__ import annotations

from playwright.sync_api import expect

from tests.browser.conftest import Console, ConsoleHttp, describe
from tests.e2e.conftest import Api, Org


def roles_by_email(org: Org) -> dict[str, str]:
    return {m["email"]: m["role"] for m in org.owner.get("/v1/members").json()}


def test_an_owner_adds_changes_and_removes_a_member_and_the_last_owner_stays(
    console: Console, stack: Api, org: Org
) -> None:
    p = console.sign_in(org.tokens["owner"])
    p.get_by_role("navigation").get_by_role("link", name="Settings → Members").click()
    expect(p.get_by_role("heading", name="Members", exact=True)).to_be_visible()
    expect(p.locator("tr[data-member]")).to_have_count(4)  # one member per role

    form = p.locator("form", has=p.get_by_role("heading", name="Add a member"))
    form.get_by_label("Email").fill("ana@example.com")
    form.get_by_label("Role").select_option("member")
    form.get_by_role("button", name="Add member").click()
    shown = p.get_by_label("Token of ana@example.com")
    token = shown.input_value()
    assert len(token) > 20
    console.shot("40-members-added")
    critical = console.axe()
    assert not critical, describe(critical)
    ana = stack.client(token)
    assert ana.get("/v1/me").json()["email"] == "ana@example.com"
    p.reload()
    assert token not in p.content()  # shown once: a reload has the list, not the token

    row = p.locator('tr[data-member="ana@example.com"]')
    row.get_by_label("Role of ana@example.com").select_option("auditor")
    row.get_by_role("button", name="Change role of ana@example.com").click()
    expect(row.get_by_label("Role of ana@example.com")).to_have_value("auditor")
    assert roles_by_email(org)["ana@example.com"] == "auditor"
    assert ana.get("/v1/me").json()["role"] == "auditor"

    row.get_by_role("button", name="Remove ana@example.com").click()
    expect(p.locator('tr[data-member="ana@example.com"]')).to_have_count(0)
    assert ana.get("/v1/me").status_code == 401

    owner_email = org.owner.get("/v1/me").json()["email"]
    mine = p.locator(f'tr[data-member="{owner_email}"]')
    mine.get_by_label(f"Role of {owner_email}").select_option("member")
    mine.get_by_role("button", name=f"Change role of {owner_email}").click()
    expect(mine.get_by_role("alert")).to_contain_text("last-owner")
    assert roles_by_email(org)[owner_email] == "owner"


def test_other_roles_see_no_members_page_and_a_direct_post_is_refused(
    console: Console, stack: Api, org: Org
) -> None:
    p = console.sign_in(org.tokens["member"])
    expect(
        p.get_by_role("navigation").get_by_role("link", name="Settings → Members")
    ).to_have_count(0)
    forger = ConsoleHttp(stack.base_url, org.tokens["member"])
    try:
        assert forger.http.get("/settings/members").status_code == 403
        r = forger.post("/settings/members", {"email": "eve@example.com", "role": "owner"})
        assert r.status_code == 403, r.status_code
        assert "eve@example.com" not in roles_by_email(org)
    finally:
        forger.close()


def test_an_owner_sets_changes_and_lifts_a_member_s_token_expiry(
    console: Console, stack: Api, org: Org
) -> None:
    """N3: the expiry is the owner's choice: set here, kept by the member's rotation."""
    made = org.owner.post(
        "/v1/members", json={"email": "brief@example.com", "role": "member"}
    ).json()
    brief = stack.client(made["token"])
    p = console.sign_in(org.tokens["owner"])
    p.goto("/settings/members")
    row = p.locator('tr[data-member="brief@example.com"]')
    expires = row.locator("[data-expires]")
    expect(expires).to_have_text("never")
    label = "Expiry of brief@example.com: days from now (empty: never)"
    row.get_by_label(label).fill("7")
    row.get_by_role("button", name="Set expiry of brief@example.com").click()
    expect(expires).not_to_have_text("never")
    seven = {m["email"]: m for m in org.owner.get("/v1/members").json()}["brief@example.com"]
    assert seven["token_expires_at"]
    rotated = brief.post("/v1/me/token/rotate")
    assert rotated.json()["token_expires_at"] == seven["token_expires_at"]
    row.get_by_label(label).fill("")
    row.get_by_role("button", name="Set expiry of brief@example.com").click()
    expect(expires).to_have_text("never")
    assert stack.client(rotated.json()["token"]).get("/v1/me").status_code == 200
    row.get_by_label(label).fill("9999")
    row.get_by_role("button", name="Set expiry of brief@example.com").click()
    expect(row.get_by_role("alert")).to_contain_text("validation-error")
