"""C7 in the console: an owner connects a Hugging Face token on Settings → Connections (a
token the Hub refuses is shown as such and nothing is saved), sees it by fingerprint only,
replaces and removes it, through the same actions as /v1/connections/huggingface; other roles
see the card without its buttons."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from tests.browser.conftest import Console, describe
from tests.e2e.conftest import Api, Org


def _card(org: Org) -> dict[str, Any]:
    card: dict[str, Any] = org.owner.get("/v1/connections").json()["huggingface"]
    return card


def test_an_owner_connects_replaces_and_removes_a_hugging_face_token(
    console: Console, stack: Api, org: Org, creds: dict[str, Any]
) -> None:
    p = console.sign_in(org.tokens["owner"])
    p.get_by_role("navigation").get_by_role("link", name="Settings → Connections").click()
    card = p.locator("section", has=p.get_by_role("heading", name="Hugging Face"))
    expect(card).to_contain_text("Not connected")

    # A token the Hub refuses: its reason next to the field, nothing saved.
    card.get_by_role("link", name="Connect Hugging Face").click()
    dialog = p.get_by_role("dialog")
    dialog.get_by_label("Hugging Face token").fill("hf_" + "Q" * 34)
    dialog.get_by_role("button", name="Connect Hugging Face").click()
    expect(p.get_by_role("dialog").get_by_role("alert")).to_contain_text("invalid-hub-token")
    assert _card(org)["status"] == "not_connected"

    # The restricted token connects: the card names its Hub account and fingerprint only.
    restricted, full = creds["hf_token_restricted"], creds["hf_token"]
    p.get_by_role("dialog").get_by_label("Hugging Face token").fill(restricted)
    p.get_by_role("dialog").get_by_role("button", name="Connect Hugging Face").click()
    expect(card).to_contain_text("Connected")
    expect(card).to_contain_text("sandbox-newcomer")
    expect(card).to_contain_text("…" + restricted[-4:])
    assert restricted not in p.content()
    console.shot("60-huggingface-connected")
    critical = console.axe()
    assert not critical, describe(critical)
    assert _card(org)["token_fingerprint"] == "…" + restricted[-4:]

    # Replaced by the full-access token, then removed.
    card.get_by_role("link", name="Replace token").click()
    p.get_by_role("dialog").get_by_label("Hugging Face token").fill(full)
    p.get_by_role("dialog").get_by_role("button", name="Replace token").click()
    expect(card).to_contain_text("sandbox-trainer")
    expect(card).to_contain_text("Token replaced")
    assert full not in p.content()
    assert _card(org)["token_fingerprint"] == "…" + full[-4:]
    card.get_by_role("button", name="Remove token").click()
    expect(card).to_contain_text("Not connected")
    assert _card(org)["status"] == "not_connected"


def test_other_roles_see_the_hugging_face_card_without_its_buttons(
    console: Console, stack: Api, org: Org
) -> None:
    p = console.sign_in(org.tokens["member"])
    p.goto(f"{stack.base_url}/settings/connections")
    card = p.locator("section", has=p.get_by_role("heading", name="Hugging Face"))
    expect(card).to_contain_text("Not connected")
    expect(card.get_by_role("link", name="Connect Hugging Face")).to_have_count(0)
