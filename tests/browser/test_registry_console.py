"""Settings → Connections: an owner attaches a baked image's private-registry credentials in the
console (the same command as `PUT /v1/connections/registry`), sees only their fingerprint, and
removes them; a member sees no form."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from tests.browser.conftest import Console
from tests.e2e.conftest import Api, Org, connect

SECRET = "ghp_ConsoleRegistryToken7781"


def test_an_owner_attaches_and_removes_registry_credentials_and_sees_only_a_fingerprint(
    console: Console, stack: Api, org: Org, creds: dict[str, Any]
) -> None:
    connect(org, creds)
    p = console.sign_in(org.tokens["owner"])
    p.goto(f"{stack.base_url}/settings/connections")
    expect(p.get_by_text("None attached.")).to_be_visible()
    p.get_by_label("Registry username").fill("acme-bot")
    p.get_by_label("Registry password or token").fill(SECRET)
    p.get_by_role("button", name="Attach registry credentials").click()
    expect(p.get_by_text("Registry credentials attached (…7781)")).to_be_visible()
    assert SECRET not in p.content()
    [registered] = stack.sandbox.model.registry_views()
    assert registered["name"] == f"tensorant-{org.id}"
    assert console.axe() == []
    p.get_by_role("button", name="Remove registry credentials").click()
    expect(p.get_by_text("None attached.")).to_be_visible()
    assert stack.sandbox.model.registry_views() == []

    console.context.clear_cookies()  # sign out: a member's view next
    member = console.sign_in(org.tokens["member"])
    member.goto(f"{stack.base_url}/settings/connections")
    expect(member.get_by_role("heading", name="Private image registry")).to_be_visible()
    expect(member.get_by_label("Registry username")).to_have_count(0)
