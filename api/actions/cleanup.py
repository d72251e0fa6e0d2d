"""Cleanup status (K1): every Pod that bills or may bill, and a warning when credit runs low;
releasing an orphan Pod (terminated until RunPod no longer lists it, K2/K3)."""

from __future__ import annotations

from api.deps import Backend, Caller, settler
from api.run_list import run_docs_where
from api.schemas.cleanup import CleanupItem, CleanupPublic
from api.schemas.runs import Accepted
from projections.reports.cleanup import CLEANUP_KIND, cleanup_status
from projections.store.base import Doc
from projections.views.orphans import ORPHANS

POD_STATUS = ("cleanup", "pod_status")


def status(*, backend: Backend, caller: Caller) -> CleanupPublic:
    """Cleanup status as `GET /v1/cleanup` and the console's Cleanup page show it."""
    now = backend.clock.now()
    reads = backend.services.report_reads
    # Only the runs whose Pod bills or may bill make items (`cleanup_items`): the store filters.
    runs: dict[str, Doc] = {}

    def with_pods() -> list[Doc]:
        found = run_docs_where(backend.views, caller.org_id, POD_STATUS, tuple(CLEANUP_KIND))
        runs.update((str(e.doc["id"]), e.doc) for e in found)
        return list(runs.values())

    status_ = cleanup_status(
        backend.views, caller.org_id, now, backend.balance_warning_days, with_pods
    )
    items = [CleanupItem(**i) for i in status_["items"]]
    for item in items:  # a running Pod whose trainer reports nothing
        doc = runs.get(item.run_id) if item.run_id else None
        since = reads.stalled_since(doc, now) if doc else None
        if since:
            item.warning = (
                f"no report from the trainer on any channel since {since} while the Pod runs "
                "(it still bills; the runtime limit stops it)"
            )
    return CleanupPublic(**{**status_, "items": items})


def release_orphan(*, backend: Backend, caller: Caller, pod_id: str, confirm: bool) -> Accepted:
    """Terminate an orphan Pod (its files are deleted: confirm); confirmed when RunPod no
    longer lists it, `needs_manual` after the configured number of failed attempts."""
    reconciler = backend.services.reconciler
    settler(backend)(reconciler.release_orphan(caller.org_id, pod_id, caller.actor, confirm))
    doc = backend.views.get(ORPHANS, caller.org_id, f"pod:{pod_id}") or {}
    return Accepted(
        id=pod_id,
        state=str(doc.get("state", "terminating")),
        detail="release requested; terminated once RunPod no longer lists the Pod",
    )
