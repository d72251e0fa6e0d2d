"""K2 at scale: the organizations a reconcile pass compares every time besides those with live
runs (an orphan not yet gone, a deployment not deleted), read from the views."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from domain.deployment import Deployment
from domain.orphans import OrphanPods
from projections.store.urls import open_view_store
from projections.views.deployments import DEPLOYMENTS, DeploymentsView
from projections.views.indexes import ViewRunIndex
from projections.views.orphans import ORPHANS, OrphansView

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def project(store: Any, view: Any, name: str, events: list[Any]) -> None:
    with store.batch(name) as b:
        for i, e in enumerate(events, start=b.position + 1):
            view.apply(b, e, i)
            b.set_position(i)


def orphans(org_id: str, *, gone: bool) -> list[Any]:
    book = OrphanPods.open(org_id, "s", T0)
    book.record_found(
        "pod1", "tensorant-run-x", "RUNNING", Decimal("0.69"), None, None, 20, 0, 60, "s", T0
    )
    if gone:
        book.record_gone("pod1", "s", T0 + timedelta(minutes=1))
    return list(book.collect_events())


def deployment(org_id: str, *, deleted: bool) -> list[Any]:
    dep = Deployment.request(
        org_id=org_id,
        run_id=f"run-{org_id}",
        base_model="Qwen/Qwen2.5-0.5B-Instruct",
        adapter_sha256="0" * 64,
        volume_id="vol",
        datacenter_id="EU-RO-1",
        actor="u",
        at=T0,
    )
    if deleted:
        dep.delete("u", T0)
        dep.confirm_gone(True, "s", T0)
    return list(dep.collect_events())


def test_k2_orgs_with_an_orphan_or_a_deployment_are_busy_and_those_gone_are_not(
    tmp_path: Path,
) -> None:
    store = open_view_store(f"sqlite:///{tmp_path / 'v.db'}")
    project(store, OrphansView(), ORPHANS, orphans("org-orphan", gone=False))
    project(store, OrphansView(), ORPHANS, orphans("org-orphan-gone", gone=True))
    project(store, DeploymentsView(), DEPLOYMENTS, deployment("org-serving", deleted=False))
    project(store, DeploymentsView(), DEPLOYMENTS, deployment("org-undeployed", deleted=True))
    assert ViewRunIndex(store).busy_org_ids() == {"org-orphan", "org-serving"}
