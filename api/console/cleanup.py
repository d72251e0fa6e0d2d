"""Cleanup status: every Pod that bills or may bill with the actions its run allows (release,
resume, recover, cancel: each asks first on the run's page), the network volume that keeps
billing, and the balance warning (K1, B2)."""

from __future__ import annotations

from fastapi.responses import Response

from api.actions import cleanup, connections, runs
from api.console.web import SignedIn, pages, render
from api.schemas.runs import RunActions
from domain.errors import TensorantError

router = pages()


@router.get("/cleanup")
def cleanup_page(p: SignedIn) -> Response:
    status = cleanup.status(backend=p.backend, caller=p.me)
    actions: dict[str, RunActions] = {}
    if p.can("manage_runs"):
        for item in status.items:
            if item.run_id and item.run_id not in actions:
                try:
                    run = runs.run(backend=p.backend, caller=p.me, run_id=item.run_id)
                except TensorantError:  # gone between the two reads: no actions offered
                    continue
                actions[item.run_id] = run.actions
    storage = connections.storage_card(views=p.backend.views, org_id=p.me.org_id)
    return render(p, "cleanup.html", cleanup=status, actions=actions, storage=storage)
