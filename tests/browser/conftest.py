"""Browser fixtures: the API and console over the RunPod sandbox (in-process), and Debian's
Chromium driven headless by Playwright (no downloaded browser). Screenshots of every page go
to tests/browser/artifacts/ (git-ignored)."""

from __future__ import annotations

import functools
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from api.app import create_app
from entrypoints.bootstrap import Container, build_for_sandbox
from entrypoints.server import ServerThread
from entrypoints.settings import Settings
from runpod_sandbox import Sandbox
from tests.e2e.conftest import Api, Org

ARTIFACTS = Path(__file__).parent / "artifacts"
AXE = Path(__file__).parent / "axe.min.js"


def _serve(box: Sandbox, settings: Settings) -> tuple[ServerThread, Container]:
    """`serve_with_sandbox`, with a start-up allowance for a loaded machine."""
    built: list[Container] = []

    def build() -> Container:
        live = settings.model_copy(
            update={
                "public_url": server.base_url,
                "reconcile_interval": 0.5,
                "projection_poll_interval": 0.2,
            }
        )
        built.append(build_for_sandbox(live, box))
        return built[-1]

    server = ServerThread(create_app(build))
    server.start(timeout=180)
    return server, built[0]


# Per module: a server reconciles its organizations every 0.5 s, which a session-long one would
# keep doing through the rest of the suite.
@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """A sandbox and the API with its console, of these tests' own (SQLite, embedded broker)."""
    settings = Settings(data_dir=tmp_path_factory.mktemp("console"))
    with Sandbox(startup_seconds=0.1) as box:
        server, container = _serve(box, settings)
        api = Api("console", server.base_url, container, box, settings)
        try:
            yield api
        finally:
            api.close()
            server.stop()


@pytest.fixture(scope="module")
def creds(stack: Api) -> dict[str, Any]:
    return stack.sandbox.credentials()


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    chromium = shutil.which("chromium")
    assert chromium, "install Debian's chromium (apt-get install -y chromium)"
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def org(stack: Api) -> Org:
    return stack.new_org()


class Console:
    """One browser context (its own cookies) on the console."""

    def __init__(self, browser: Browser, base_url: str) -> None:
        self.context = browser.new_context(base_url=base_url, accept_downloads=True)
        self.page: Page = self.context.new_page()
        self.base_url = base_url
        self.pages: list[str] = []

    def sign_in(self, token: str) -> Page:
        p = self.page
        p.goto("/")
        p.get_by_label("Member token").fill(token)
        p.get_by_role("button", name="Sign in").click()
        p.wait_for_url(self.base_url + "/")
        return p

    def shot(self, name: str) -> Path:
        ARTIFACTS.mkdir(exist_ok=True)
        target = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(target), full_page=True)
        self.pages.append(self.page.content())
        return target

    def axe(self) -> list[dict[str, Any]]:
        """axe-core's critical violations on the current page."""
        # DevTools evaluation is not subject to the page's CSP (add_script_tag would be: the
        # console forbids inline scripts).
        self.page.evaluate(_axe_source())
        # Only violations are aggregated: passes and incomplete checks, which nothing here reads,
        # were most of each page's run.
        result = self.page.evaluate(
            "async () => await axe.run(document, {resultTypes: ['violations']})"
        )
        return [v for v in result["violations"] if v.get("impact") == "critical"]

    def close(self) -> None:
        self.context.close()


@functools.cache
def _axe_source() -> str:
    return AXE.read_text()


@pytest.fixture
def console(browser: Browser, stack: Api) -> Iterator[Console]:
    c = Console(browser, stack.base_url)
    yield c
    c.close()


def describe(violations: list[dict[str, Any]]) -> str:
    return json.dumps(
        [{"id": v["id"], "nodes": [n["html"] for n in v["nodes"][:3]]} for v in violations],
        indent=1,
    )


CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


class ConsoleHttp:
    """The console's forms posted without a browser (what a browser would send, or a forger)."""

    def __init__(self, base_url: str, token: str | None = None) -> None:
        self.http = httpx.Client(base_url=base_url, timeout=60, follow_redirects=False)
        self.origin = base_url
        self.csrf = ""
        if token is not None:
            self.csrf = self.fresh_csrf("/")
            r = self.post("/signin", {"token": token})
            assert r.status_code == 303, r.text
            self.fresh_csrf("/")  # sign-in gives a new session, with its own CSRF token

    def fresh_csrf(self, path: str) -> str:
        r = self.http.get(path)
        found = CSRF.search(r.text)
        assert found, r.text[:500]
        self.csrf = found.group(1)
        return self.csrf

    def post(
        self,
        path: str,
        data: dict[str, str],
        *,
        csrf: bool = True,
        origin: str | None = None,
        files: dict[str, Any] | None = None,
    ) -> httpx.Response:
        body = {**data, "csrf_token": self.csrf} if csrf else dict(data)
        headers = {"Origin": origin or self.origin}
        return self.http.post(path, data=body, files=files, headers=headers)

    def close(self) -> None:
        self.http.close()
