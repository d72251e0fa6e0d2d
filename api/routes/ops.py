"""Operations: liveness, readiness and Prometheus metrics (O3)."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from api.deps import Backend, BackendDep
from api.schemas.ops import Health
from projections.views.identity import ORGANIZATIONS
from projections.views.indexes import last_reconciled
from projections.views.orphans import ORPHANS
from projections.views.runs import RUNS

router = APIRouter(tags=["operations"])
_register_guard = threading.Lock()


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    return Health(status="ok")


@router.get("/readyz", response_model=Health, responses={503: {"model": Health}})
def readyz(backend: BackendDep) -> Response:
    checks: dict[str, str] = {}
    try:
        backend.services.log.recorder.max_notification_id()
        checks["event_store"] = "ok"
    except Exception as e:  # readiness reports, it does not raise
        checks["event_store"] = f"unreachable: {type(e).__name__}"
    try:
        backend.views.position(ORGANIZATIONS)
        checks["view_store"] = "ok"
    except Exception as e:
        checks["view_store"] = f"unreachable: {type(e).__name__}"
    ok = all(v == "ok" for v in checks.values())
    body = Health(status="ready" if ok else "not_ready", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)


class CleanupCollector(Collector):
    """K1-K3 signals read from the views at scrape time, so they hold wherever the reconciler
    runs (in `serve` or in `tensorant worker` processes)."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def collect(self) -> Iterator[GaugeMetricFamily]:
        views = self.backend.views
        by_state: Counter[str] = Counter()
        attempts: Counter[str] = Counter()
        for org_id, key, doc in views.iter_all(RUNS):
            if org_id == "_" or not key.startswith("run:"):
                continue
            by_state[doc["cleanup"]["pod_status"]] += 1
            attempts["run"] += int(doc["cleanup"]["attempts"])
        orphans = 0
        for org_id, key, doc in views.iter_all(ORPHANS):
            if org_id == "_" or not key.startswith("pod:"):
                continue
            by_state[f"orphan_{doc['state']}"] += 1
            attempts["orphan"] += int(doc["attempts"])
            orphans += doc["state"] in ("orphan", "terminating", "needs_manual")
        pods = GaugeMetricFamily(
            "tensorant_pods", "Pods known to the model by state", labels=["state"]
        )
        for state, n in sorted(by_state.items()):
            pods.add_metric([state], n)
        yield pods
        tries = GaugeMetricFamily(
            "tensorant_termination_failed_attempts",
            "Failed termination attempts recorded (monotonic)",
            labels=["kind"],
        )
        for kind in ("run", "orphan"):
            tries.add_metric([kind], attempts[kind])
        yield tries
        yield GaugeMetricFamily(
            "tensorant_orphan_pods",
            "Pods with our naming and no live run, not yet gone",
            value=orphans,
        )
        last = last_reconciled(views)
        lag = (self.backend.clock.now() - last).total_seconds() if last else float("nan")
        yield GaugeMetricFamily(
            "tensorant_reconcile_lag_seconds",
            "Seconds since the last completed reconcile pass",
            value=lag,
        )


@router.get("/metrics", response_class=Response, include_in_schema=False)
def metrics(request: Request, backend: BackendDep) -> Response:
    state = request.app.state
    with _register_guard:
        if getattr(state, "cleanup_collector", None) is None:
            state.cleanup_collector = CleanupCollector(backend)
            state.metrics.registry.register(state.cleanup_collector)
    return Response(generate_latest(state.metrics.registry), media_type=CONTENT_TYPE_LATEST)
