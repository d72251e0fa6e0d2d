"""Callbacks of the training container, authenticated by its per-run token (not a member token)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.deps import AppDep, ContainerDep, settle
from api.problems import Unauthenticated
from api.routers.common import problems
from api.run_schemas import TrainerExported, TrainerFailed, TrainerLogs, TrainerProgress
from domain.times import parse_iso

router = APIRouter(
    prefix="/v1/trainer/runs", tags=["trainer"], responses=problems(401, 404, 409, 422, 503)
)
_bearer = HTTPBearer(auto_error=False, description="TENSORANT_RUN_TOKEN from the Pod's environment")
Token = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _token(credentials: HTTPAuthorizationCredentials | None) -> str:
    if credentials is None or not credentials.credentials:
        raise Unauthenticated("send Authorization: Bearer <run token>")
    return credentials.credentials


def _time(value: str | None) -> datetime:
    if value:
        try:
            return parse_iso(value)
        except ValueError:
            pass
    return datetime.now(UTC)


@router.post("/{run_id}/logs", status_code=status.HTTP_202_ACCEPTED)
def logs(
    run_id: str, body: TrainerLogs, credentials: Token, app: AppDep, container: ContainerDep
) -> dict[str, int]:
    app.trainer.authenticate(run_id, _token(credentials))
    lines = [(_time(x.time), x.text) for x in body.lines]
    last = container.logs.append(run_id, lines, batch=body.batch)
    return {"last_seq": last}


@router.post("/{run_id}/progress", status_code=status.HTTP_202_ACCEPTED)
def progress(
    run_id: str, body: TrainerProgress, credentials: Token, app: AppDep, container: ContainerDep
) -> dict[str, str]:
    settle(container, app.trainer.progress(run_id, _token(credentials), body.phase))
    return {"status": "accepted"}


@router.post("/{run_id}/exported", status_code=status.HTTP_202_ACCEPTED)
def exported(
    run_id: str, body: TrainerExported, credentials: Token, app: AppDep, container: ContainerDep
) -> dict[str, str]:
    settle(
        container,
        app.trainer.exported(
            run_id, _token(credentials), body.object_key, body.sha256, body.size_bytes
        ),
    )
    return {"status": "accepted"}


@router.post("/{run_id}/failed", status_code=status.HTTP_202_ACCEPTED)
def failed(
    run_id: str, body: TrainerFailed, credentials: Token, app: AppDep, container: ContainerDep
) -> dict[str, str]:
    settle(container, app.trainer.failed(run_id, _token(credentials), body.reason, body.detail))
    return {"status": "accepted"}
