"""Acceptance 3: `/docs` renders with the network cut: its Swagger UI comes from the package,
and no request leaves loopback. The descriptions are in users' words (no feature codes)."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from playwright.sync_api import Browser, Route, expect

from tests.browser.conftest import AXE, describe
from tests.e2e.conftest import Api

LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def test_the_api_docs_render_offline(browser: Browser, stack: Api) -> None:
    context = browser.new_context(base_url=stack.base_url)
    left: list[str] = []
    asked: list[str] = []

    def cut(route: Route) -> None:
        url = route.request.url
        asked.append(url)
        if urlsplit(url).hostname in LOOPBACK:
            route.continue_()
        else:  # the network is cut: anything for elsewhere fails, and is noted
            left.append(url)
            route.abort("internetdisconnected")

    context.route("**/*", cut)
    try:
        p = context.new_page()
        p.goto("/docs")
        expect(p.locator(".swagger-ui .info .title")).to_contain_text("Tensorant", timeout=30_000)
        runs = p.locator(".opblock-tag-section", has_text="runs").first
        expect(runs).to_be_visible()
        launch = p.locator(".opblock", has_text="/v1/runs/{run_id}/launch").first
        launch.locator(".opblock-summary").first.click()
        expect(launch).to_contain_text("Re-checks availability, price and balance now")
        assert not re.search(r"\bR4:", launch.inner_text())
        p.evaluate(AXE.read_text())
        result = p.evaluate("async () => await axe.run(document)")
        critical = [v for v in result["violations"] if v.get("impact") == "critical"]
        assert not critical, describe(critical)
        assert left == [], left
        assert any(u.endswith("/docs/assets/swagger-ui-bundle.js") for u in asked), asked
    finally:
        context.close()


def test_the_api_document_has_no_feature_codes(stack: Api) -> None:
    doc = stack.client().get("/openapi.json").json()
    texts = [
        op.get(k) or ""
        for ops in doc["paths"].values()
        for op in ops.values()
        for k in ("summary", "description")
    ]
    leading = [t for t in texts if re.match(r"\s*[A-Z]{1,2}\d{1,2}\b", t)]
    inline = [t for t in texts if re.search(r"\([A-Z]{1,2}\d{1,2}\)", t)]
    assert leading == [] and inline == [], (leading, inline)
    assert (
        "Re-checks availability" in doc["paths"]["/v1/runs/{run_id}/launch"]["post"]["description"]
    )
