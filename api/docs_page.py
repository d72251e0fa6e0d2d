"""The interactive API documentation at `/docs`, whole without the internet: Swagger UI's script
and style come from the `swagger-ui-py` package (served at `/docs/assets/`), never a CDN, and
the page runs no inline script (its own CSP says so). The API document's descriptions are the
routes' docstrings in users' words: the feature codes that lead them for developers (`R4: ...`,
`(S5)`) are left out of the document."""

from __future__ import annotations

import re
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import FileResponse, HTMLResponse

HERE = Path(__file__).parent / "docs_static"
# Only these files of the package: its editor and source maps are not served.
VENDORED = {
    "swagger-ui-bundle.js": "text/javascript",
    "swagger-ui.css": "text/css",
    "favicon-32x32.png": "image/png",
}
OURS = {"docs.js": "text/javascript"}
# Swagger UI sets style attributes as it renders; nothing else is allowed but this origin.
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "object-src 'none'"
)
PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} · API documentation</title>
<link rel="stylesheet" href="/docs/assets/swagger-ui.css">
<link rel="icon" type="image/png" href="/docs/assets/favicon-32x32.png">
</head>
<body>
<main id="swagger-ui" data-openapi-url="{openapi_url}"></main>
<script src="/docs/assets/swagger-ui-bundle.js"></script>
<script src="/docs/assets/docs.js"></script>
</body>
</html>
"""
# "R4: ", "S2–S5: ", "R1–R3, R5: " at the start; " (S5)" or " (B1, B2)" anywhere.
CODE = r"[A-Z]{1,2}\d{1,2}(?:\s*[–-]\s*[A-Z]{0,2}\d{1,2})?"
LEADING = re.compile(rf"^\s*{CODE}(?:\s*,\s*{CODE})*\s*:\s*")
INLINE = re.compile(rf"\s*\((?:{CODE})(?:\s*,\s*{CODE})*\)")


def users_words(text: str) -> str:
    """A docstring as the API document shows it: no feature codes; starts with a capital."""
    text = INLINE.sub("", LEADING.sub("", text))
    return text[:1].upper() + text[1:]


def _clean(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("description", "summary") and isinstance(value, str):
                node[key] = users_words(value)
            else:
                _clean(value)
    elif isinstance(node, list):
        for item in node:
            _clean(item)


@cache
def _vendored_dir() -> Path:
    return Path(str(files("swagger_ui") / "static"))


def install(app: FastAPI) -> None:
    """`/docs`, its assets, and the API document in users' words (create the app with
    `docs_url=None, redoc_url=None`)."""

    built = app.openapi  # FastAPI's own, which keeps what it builds in `app.openapi_schema`

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            _clean(built())
        return built()

    app.openapi = openapi  # type: ignore[method-assign]
    headers = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff"}

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        html = PAGE.format(title=app.title, openapi_url=app.openapi_url or "/openapi.json")
        return HTMLResponse(html, headers=headers)

    @app.get("/docs/assets/{name}", include_in_schema=False)
    def asset(name: str) -> FileResponse:
        if name in OURS:
            return FileResponse(HERE / name, media_type=OURS[name], headers=headers)
        if name in VENDORED:
            path = _vendored_dir() / name
            return FileResponse(path, media_type=VENDORED[name], headers=headers)
        raise HTTPException(404)
