"""Training runs (R1–R13): drafts, confirmed launch, cancel, recovery, resume, release, history."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, File, Query, Response, UploadFile, status

from api.deps import (
    BackendDep,
    Caller,
    ClockDep,
    Reader,
    ReaderToken,
    RunManager,
    RunsDep,
    SettleDep,
    ViewsDep,
    read_as,
)
from api.responses import json_response
from api.run_list import presented_runs, runs_json
from api.schemas.common import AUTHENTICATED, MAX_CURSOR
from api.schemas.runs import (
    Accepted,
    LaunchIn,
    ReleaseIn,
    ResumeIn,
    RunCreate,
    RunEvent,
    RunEvents,
    RunPublic,
)
from application.ports import Clock
from application.trainer_callbacks import TrainerCallbacks
from domain.errors import NotFound
from domain.run_config import RunConfig
from domain.times import iso
from projections.store.base import ViewStore, dumps
from projections.views.runs import RUNS, present_run

router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=AUTHENTICATED)


def run_doc(views: ViewStore, org_id: str, run_id: str) -> dict[str, Any]:
    doc = views.get(RUNS, org_id, f"run:{run_id}")
    if doc is None:  # another organization's run looks exactly like a missing one (A4)
        raise NotFound(f"run {run_id} not found")
    return doc


def accepted(views: ViewStore, org_id: str, run_id: str, detail: str) -> Accepted:
    """202: the command was recorded (and the views reflect it); the worker does the rest."""
    return Accepted(id=run_id, state=run_doc(views, org_id, run_id)["state"], detail=detail)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=RunPublic)
def create(
    body: RunCreate,
    caller: RunManager,
    runs: RunsDep,
    settle: SettleDep,
    views: ViewsDep,
    clock: ClockDep,
) -> RunPublic:
    """R1–R3: save a draft; nothing is rented."""
    run_id, position = runs.draft(caller.org_id, caller.actor, RunConfig(**body.model_dump()))
    settle(position)
    return RunPublic(**present_run(run_doc(views, caller.org_id, run_id), clock.now()))


def list_runs(
    caller: Caller, views: ViewStore, clock: Clock, trainer: TrainerCallbacks
) -> list[RunPublic]:
    """The organization's runs as `GET /v1/runs` shows them (the console's runs pages too);
    shared models (api.run_list): read them, never change them."""
    return [run for run, _ in presented_runs(views, caller.org_id, clock.now(), trainer)]


@router.get("", response_model=list[RunPublic])
async def get_runs(sent: ReaderToken, backend: BackendDep) -> Response:
    # The clock and the trainer callbacks from the backend, not as dependencies of their own:
    # each dependency FastAPI solves per request costs CPU (profiled under wrk).
    def shown(caller: Caller) -> list[tuple[RunPublic, bytes]]:
        now = backend.clock.now()
        return presented_runs(backend.views, caller.org_id, now, backend.services.trainer)

    return Response(runs_json(await read_as(backend, sent, shown)), media_type="application/json")


def get_run(
    run_id: str, caller: Caller, views: ViewStore, clock: Clock, trainer: TrainerCallbacks
) -> RunPublic:
    """The run as `GET /v1/runs/{id}` shows it (the console's run page too). Its reports are
    asked for first, so that they travel with the document's read (`report_status_later`); a
    run of another organization is not found before they are looked at."""
    status = trainer.report_status_later(run_id)
    doc, now = run_doc(views, caller.org_id, run_id), clock.now()
    return RunPublic(**present_run(doc, now), **status(doc, now))


@router.get("/{run_id}", response_model=RunPublic)
async def read_run(run_id: str, sent: ReaderToken, backend: BackendDep) -> Response:
    """The run; `progress` (with the channel it came by, `via`) and `stalled_since` (nothing
    arrived on any channel for the configured time while the Pod runs) come from its reports."""
    views, clock, trainer = backend.views, backend.clock, backend.services.trainer
    run = await read_as(
        backend, sent, lambda caller: get_run(run_id, caller, views, clock, trainer)
    )
    return json_response(RunPublic, run)


@router.patch("/{run_id}", response_model=RunPublic)
def update(
    run_id: str,
    body: RunCreate,
    caller: RunManager,
    runs: RunsDep,
    settle: SettleDep,
    views: ViewsDep,
    clock: ClockDep,
) -> RunPublic:
    settle(runs.update_draft(caller.org_id, run_id, caller.actor, RunConfig(**body.model_dump())))
    return RunPublic(**present_run(run_doc(views, caller.org_id, run_id), clock.now()))


@router.delete("/{run_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete(run_id: str, caller: RunManager, runs: RunsDep, settle: SettleDep) -> Response:
    settle(runs.discard_draft(caller.org_id, run_id, caller.actor))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{run_id}/launch", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted)
def launch(
    run_id: str,
    body: LaunchIn,
    caller: RunManager,
    runs: RunsDep,
    settle: SettleDep,
    views: ViewsDep,
) -> Accepted:
    """R4: re-checks availability, price and balance now; the worker then creates one Pod."""
    settle(
        runs.launch(caller.org_id, run_id, caller.actor, body.confirm, body.accepted_price_per_hour)
    )
    return accepted(views, caller.org_id, run_id, "launch confirmed; the Pod is being created")


@router.post("/{run_id}/cancel", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted)
def cancel(
    run_id: str, caller: RunManager, runs: RunsDep, settle: SettleDep, views: ViewsDep
) -> Accepted:
    settle(runs.cancel(caller.org_id, run_id, caller.actor))
    return accepted(views, caller.org_id, run_id, "cancel requested")


@router.post(
    "/{run_id}/recovery/verify", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted
)
def recover_verify(
    run_id: str, caller: RunManager, runs: RunsDep, settle: SettleDep, views: ViewsDep
) -> Accepted:
    """R9: verify the adapter saved on the network volume."""
    settle(runs.recover_from_volume(caller.org_id, run_id, caller.actor))
    return accepted(views, caller.org_id, run_id, "verifying the saved adapter")


@router.post(
    "/{run_id}/recovery/upload", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted
)
def recover_upload(
    run_id: str,
    caller: RunManager,
    runs: RunsDep,
    settle: SettleDep,
    views: ViewsDep,
    file: Annotated[UploadFile, File(description="adapter.zip from /workspace/data/")],
) -> Accepted:
    """R10: custom S3 — upload adapter.zip retrieved from the Pod; it is stored, then verified."""
    # Starlette spooled the upload to a temporary file: it is hashed and stored in chunks.
    settle(runs.recover_from_upload(caller.org_id, run_id, caller.actor, file.file))
    return accepted(views, caller.org_id, run_id, "uploaded; verifying the adapter")


@router.post("/{run_id}/pod/resume", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted)
def resume(
    run_id: str,
    body: ResumeIn,
    caller: RunManager,
    runs: RunsDep,
    settle: SettleDep,
    views: ViewsDep,
) -> Accepted:
    """R11: GPU billing resumes; may fail for lack of capacity (the Pod then stays stopped)."""
    settle(runs.resume_pod(caller.org_id, run_id, caller.actor, body.confirm_billing))
    return accepted(
        views,
        caller.org_id,
        run_id,
        "Pod resumed: GPU billing has resumed. Reach it with basic SSH "
        "(ssh <podHostId>@ssh.runpod.io; no SCP/SFTP)",
    )


@router.post("/{run_id}/pod/release", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted)
def release(
    run_id: str,
    body: ReleaseIn,
    caller: RunManager,
    runs: RunsDep,
    settle: SettleDep,
    views: ViewsDep,
) -> Accepted:
    """R13: releasing an unverified Pod deletes the only copy of its files: confirm it."""
    settle(runs.release_pod(caller.org_id, run_id, caller.actor, body.confirm_delete_unverified))
    return accepted(views, caller.org_id, run_id, "release requested")


@router.get("/{run_id}/events", response_model=RunEvents)
def events(
    run_id: str,
    caller: Reader,
    views: ViewsDep,
    runs: RunsDep,
    after: Annotated[int, Query(ge=0, le=MAX_CURSOR)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> RunEvents:
    run_doc(views, caller.org_id, run_id)
    items = [history_line(e) for e in runs.history(run_id, after, limit)]
    return RunEvents(events=items, next_after=items[-1].version if items else after)


HISTORY_SKIP = {"originator_id", "originator_version", "timestamp", "actor", "originator_topic"}


def history_line(e: Any) -> RunEvent:
    """One line of a run's history: what happened, when, by whom. Its values are the JSON the
    run view kept when it copied them (`dumps`: Decimals, UUIDs and times as text)."""
    data = {
        k: (str(v) if isinstance(v, Decimal) else v)
        for k, v in vars(e).items()
        if k not in HISTORY_SKIP
    }
    line = {
        "version": e.originator_version,
        "type": type(e).__name__,
        "time": iso(e.timestamp),
        "actor": e.actor,
        "data": data,
    }
    return RunEvent(**orjson.loads(dumps(line)))
