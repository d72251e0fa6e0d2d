"""Cleanup status: every Pod that bills or may bill, and the balance warning (K1, B2)."""

from __future__ import annotations

from fastapi.responses import Response

from api.actions import cleanup
from api.console.web import SignedIn, pages, render

router = pages()


@router.get("/cleanup")
def cleanup_page(p: SignedIn) -> Response:
    return render(p, "cleanup.html", cleanup=cleanup.status(backend=p.backend, caller=p.me))
