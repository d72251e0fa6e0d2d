"""Operations: liveness, readiness and Prometheus metrics (O3)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from api.deps import ContainerDep
from api.schemas import Health
from projections.views import ORGANIZATIONS

router = APIRouter(tags=["operations"])


@router.get("/healthz", response_model=Health)
def healthz() -> Health:
    return Health(status="ok")


@router.get("/readyz", response_model=Health, responses={503: {"model": Health}})
def readyz(container: ContainerDep) -> Response:
    checks: dict[str, str] = {}
    try:
        container.app.recorder.max_notification_id()
        checks["event_store"] = "ok"
    except Exception as e:  # readiness reports, it does not raise
        checks["event_store"] = f"unreachable: {type(e).__name__}"
    try:
        container.views.position(ORGANIZATIONS)
        checks["view_store"] = "ok"
    except Exception as e:
        checks["view_store"] = f"unreachable: {type(e).__name__}"
    ok = all(v == "ok" for v in checks.values())
    body = Health(status="ready" if ok else "not_ready", checks=checks)
    return JSONResponse(body.model_dump(), status_code=200 if ok else 503)


@router.get("/metrics", response_class=Response, include_in_schema=False)
def metrics(request: Request) -> Response:
    return Response(generate_latest(request.app.state.metrics.registry),
                    media_type=CONTENT_TYPE_LATEST)
