"""Callbacks of the training container, authenticated by its per-run token (not a member token)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Response, status
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from api.deps import BackendDep, LogsDep, SettleDep, TrainerDep
from api.problems import Unauthenticated
from api.schemas.common import problem_responses
from api.schemas.trainer import TrainerExported, TrainerFailed, TrainerLogs, TrainerProgress
from domain.times import parse_iso
from trainer.protocol import HUB_TOKEN_CALLBACK

router = APIRouter(
    prefix="/v1/trainer/runs",
    tags=["trainer"],
    responses=problem_responses(401, 404, 409, 422, 503),
)
_bearer = HTTPBearer(auto_error=False, description="TENSORANT_RUN_TOKEN from the Pod's environment")


Token = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]


def _token(credentials: HTTPAuthorizationCredentials | None) -> str:
    """The run token; checked after the body, so a bad body is a 422 whoever sends it."""
    if credentials is None or not credentials.credentials:
        raise Unauthenticated("send Authorization: Bearer <run token>")
    return credentials.credentials


def _time(value: str | None) -> datetime:
    """A line's own time when it has a readable one; else when it arrived."""
    if value:
        try:
            return parse_iso(value)
        except ValueError:
            pass
    return datetime.now(UTC)


@router.post("/{run_id}/logs", status_code=status.HTTP_202_ACCEPTED)
def logs(
    run_id: str, body: TrainerLogs, token: Token, trainer: TrainerDep, store: LogsDep
) -> dict[str, int]:
    if body.lines and all(x.boot and x.seq is not None for x in body.lines):
        # Keyed lines (the trainer's): each stored once, whichever channel brought it first.
        keyed = [(x.boot, x.seq, _time(x.time), x.text) for x in body.lines]
        trainer.log_lines(run_id, _token(token), keyed)
        return {"last_seq": store.last_seq(run_id)}
    trainer.check_token(run_id, _token(token))
    lines = [(_time(x.time), x.text) for x in body.lines]
    return {"last_seq": store.append(run_id, lines, batch=body.batch)}


@router.post("/{run_id}/progress", status_code=status.HTTP_202_ACCEPTED)
def progress(
    run_id: str, body: TrainerProgress, token: Token, trainer: TrainerDep, settle: SettleDep
) -> dict[str, str]:
    extra = body.model_dump(exclude={"phase"})
    settle(trainer.progress(run_id, _token(token), body.phase, **extra))
    return {"status": "accepted"}


@router.post("/{run_id}/exported", status_code=status.HTTP_202_ACCEPTED)
def exported(
    run_id: str, body: TrainerExported, token: Token, trainer: TrainerDep, settle: SettleDep
) -> dict[str, str]:
    extra = body.model_dump(exclude={"object_key", "sha256", "size_bytes"})
    settle(
        trainer.exported(
            run_id, _token(token), body.object_key, body.sha256, body.size_bytes, **extra
        )
    )
    return {"status": "accepted"}


@router.post("/{run_id}/failed", status_code=status.HTTP_202_ACCEPTED)
def failed(
    run_id: str, body: TrainerFailed, token: Token, trainer: TrainerDep, settle: SettleDep
) -> dict[str, str]:
    extra = body.model_dump(exclude={"reason", "detail"})
    settle(trainer.failed(run_id, _token(token), body.reason, body.detail, **extra))
    return {"status": "accepted"}


@router.get(f"/{{run_id}}/{HUB_TOKEN_CALLBACK}")
def hub_token(run_id: str, token: Token, trainer: TrainerDep, backend: BackendDep) -> Response:
    """C7: the organization's Hugging Face token, for a live run on a gated model only (the
    least exposed way to the Pod: not its environment, which any key that can read the RunPod
    account reads, nor the manifest on storage). Never cached; 404 for any other run."""
    org_id, base_model = trainer.base_model_of(run_id, _token(token))
    value = backend.services.hub.token_for_run(org_id, base_model)
    return JSONResponse({"token": value}, headers={"Cache-Control": "no-store"})
