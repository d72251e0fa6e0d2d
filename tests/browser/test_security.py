"""Acceptance 4: CSRF and Origin checks, the session cookie's flags, no key material in pages,
and a Content-Security-Policy without inline scripts."""

from __future__ import annotations

import re
from typing import Any

from tests.browser.conftest import ConsoleHttp
from tests.e2e.conftest import Api, Org, problem
from tests.e2e.flows import draft, launch, ready, wait_state

PAGES = ("/", "/settings/connections", "/projects", "/runs", "/runs/new", "/cleanup")


def test_a_form_without_the_csrf_token_or_from_another_origin_is_refused(
    stack: Api, org: Org, creds: dict[str, Any]
) -> None:
    c = ConsoleHttp(stack.base_url, org.tokens["owner"])
    try:
        key = {"api_key": creds["api_key"]}
        no_token = c.post("/settings/connections/runpod", key, csrf=False)
        assert no_token.status_code == 403
        assert "CSRF" in no_token.text
        wrong_token = c.http.post(
            "/settings/connections/runpod",
            data={**key, "csrf_token": "forged"},
            headers={"Origin": stack.base_url},
        )
        assert wrong_token.status_code == 403
        foreign = c.post("/settings/connections/runpod", key, origin="https://evil.example")
        assert foreign.status_code == 403
        assert "another origin" in foreign.text
        no_origin = c.http.post("/settings/connections/runpod", data={**key, "csrf_token": c.csrf})
        assert no_origin.status_code == 403
        # None of them connected anything; the same post with both checks passing does.
        assert org.owner.get("/v1/connections").json()["compute"]["status"] == "not_connected"
        ok = c.post("/settings/connections/runpod", key)
        assert ok.status_code == 303, ok.text
        assert org.owner.get("/v1/connections").json()["compute"]["status"] == "connected"
    finally:
        c.close()


def test_the_session_cookie_is_httponly_and_samesite_strict_and_holds_no_token(
    stack: Api, org: Org
) -> None:
    c = ConsoleHttp(stack.base_url)
    try:
        c.fresh_csrf("/")
        r = c.post("/signin", {"token": org.tokens["member"]})
        assert r.status_code == 303
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie
        assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
        assert "Secure" not in cookie  # plain http on loopback; https sets Secure
        assert org.tokens["member"] not in cookie
        # Signing out ends the session on the server: the old cookie no longer signs in.
        c.fresh_csrf("/runs")
        assert c.post("/signout", {}).status_code == 303
        assert c.http.get("/runs").status_code == 303
    finally:
        c.close()


def test_pages_send_a_csp_without_inline_scripts_and_no_key_material(
    stack: Api, org: Org, creds: dict[str, Any]
) -> None:
    c = ConsoleHttp(stack.base_url, org.tokens["owner"])
    try:
        c.post("/settings/connections/runpod", {"api_key": creds["api_key"]})
        for path in PAGES:
            r = c.http.get(path)
            assert r.status_code == 200, (path, r.status_code)
            csp = r.headers["content-security-policy"]
            script_src = next(d for d in csp.split(";") if d.strip().startswith("script-src"))
            assert "'unsafe-inline'" not in script_src and "'unsafe-eval'" not in script_src
            assert "<script>" not in r.text and " on" + "click=" not in r.text
            for secret in (creds["api_key"], creds["s3_secret_access_key"]):
                assert secret not in r.text
            assert org.tokens["owner"] not in r.text
        for script in ("/console/static/console.js", "/console/static/htmx.min.js"):
            body = c.http.get(script).text
            assert creds["api_key"] not in body
    finally:
        c.close()


def test_the_api_document_stays_the_api(stack: Api, org: Org) -> None:
    paths = org.owner.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if not p.startswith("/v1") and p not in _OPS]
    problem(org.owner.get("/v1/runs/nope"), 404, "not-found")  # the API still answers JSON


_OPS = {"/healthz", "/readyz", "/metrics"}


def test_disconnect_is_refused_while_pods_depend_saying_why(
    stack: Api, creds: dict[str, Any]
) -> None:
    """C4's own input: the organization's run has a live Pod at RunPod."""
    org, config = ready(stack, creds)
    run = draft(org, config)
    stack.sandbox.set_scenario("hang", 1)  # the trainer never finishes: the Pod stays running
    launch(org, run["id"])
    assert wait_state(org, run["id"], "running")["pod_id"]
    c = ConsoleHttp(stack.base_url, org.tokens["owner"])
    try:
        r = c.post("/settings/connections/runpod/disconnect", {"confirmed": "yes"})
        assert r.status_code == 409
        error = re.search(
            r'<div class="error" role="alert" id="disconnect-error">(.*?)</div>', r.text
        )
        assert error, r.text
        assert "pods-depend-on-key" in error.group(1)
        assert "release them first" in error.group(1)
        assert org.owner.get("/v1/connections").json()["compute"]["status"] == "connected"
        assert org.member.post(f"/v1/runs/{run['id']}/cancel").status_code == 202
        assert wait_state(org, run["id"], "cancelled")["cleanup"]["pod_status"] == "terminated"
        # Without the confirmation's field, the post asks instead of disconnecting.
        asked = c.post("/settings/connections/runpod/disconnect", {})
        assert asked.status_code == 200 and "Disconnect RunPod?" in asked.text
        assert org.owner.get("/v1/connections").json()["compute"]["status"] == "connected"
        r = c.post("/settings/connections/runpod/disconnect", {"confirmed": "yes"})
        assert r.status_code == 303
        assert org.owner.get("/v1/connections").json()["compute"]["status"] == "not_connected"
    finally:
        c.close()
