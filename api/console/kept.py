"""Pages kept per session: the runs page, asked again unchanged, is the text rendered last time."""

from __future__ import annotations

from typing import Any

from fastapi.responses import HTMLResponse

from api.console.web import SECURITY_HEADERS, Page, render_with, set_cookie
from projections.store.lru import Lru

# The last page each session was shown per template, with what it was made of (`render_kept`).
MAX_KEPT_PAGES = 64  # ~100 KB each at 100 runs
_KEPT_PAGES: Lru[tuple[str, str], tuple[tuple[Any, ...], bytes]] = Lru(MAX_KEPT_PAGES)


def render_kept(p: Page, template: str, made_of: object, **context: Any) -> HTMLResponse:
    """`render` of a page made only of the session's caller, its CSRF token, the path, the
    organization's document and `made_of`, a kept object that stands for the rest of the page
    (`context`) and is the same object only while that is unchanged (the runs page's rows,
    `run_rows`). Asked again by the same session with all of these the same (`made_of` by
    identity, the others by value), the page is the text rendered last time: rendering the
    page around 100 kept rows was 6.7% of the console's CPU under wrk (bench/api_load.py)."""
    org = p.organization()  # also takes the answer of a read asked ahead
    same = (p.caller, p.session.csrf, p.request.url.path, org)
    key = (p.session.id, template)
    kept = _KEPT_PAGES.get(key)
    if kept is not None and kept[0][0] is made_of and kept[0][1:] == same:
        response = HTMLResponse(kept[1], headers=SECURITY_HEADERS)
        if p.new_cookie:
            set_cookie(p.request, response, p.session)
        return response
    response = render_with(p, template, 200, org, context)  # the organization as read above
    _KEPT_PAGES.put(key, ((made_of, *same), bytes(response.body)))
    return response
