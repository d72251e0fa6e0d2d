"""Training runs (R1–R13): drafts, confirmed launch, cancel, recovery, resume, release, history."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, File, Query, Response, UploadFile, status

from api.deps import AppDep, Caller, ContainerDep, Reader, ViewsDep, allowed, settle
from api.routers.common import AUTHENTICATED
from api.run_schemas import (
    Accepted,
    LaunchIn,
    ReleaseIn,
    ResumeIn,
    RunCreate,
    RunEvent,
    RunEvents,
    RunPublic,
)
from domain.errors import NotFound
from domain.run_config import RunConfig
from projections.store.base import ViewStore
from projections.views.runs import RUNS, present_run

router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=AUTHENTICATED)
RunManager = Annotated[Caller, Depends(allowed("manage_runs"))]
MAX_UPLOAD = 512 * 1024 * 1024


def run_doc(views: ViewStore, org_id: str, run_id: str) -> dict:  # type: ignore[type-arg]
    doc = views.get(RUNS, org_id, f"run:{run_id}")
    if doc is None:  # another organization's run looks exactly like a missing one (A4)
        raise NotFound(f"run {run_id} not found")
    return doc


def _public(container: ContainerDep, org_id: str, run_id: str) -> RunPublic:
    doc = run_doc(container.views, org_id, run_id)
    return RunPublic(**present_run(doc, container.clock.now()))


def _accepted(
    container: ContainerDep, caller: Caller, run_id: str, position: int, detail: str
) -> Accepted:
    settle(container, position)
    doc = run_doc(container.views, caller.org_id, run_id)
    return Accepted(id=run_id, state=doc["state"], detail=detail)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=RunPublic)
def create(body: RunCreate, caller: RunManager, app: AppDep, container: ContainerDep) -> RunPublic:
    """R1–R3: save a draft; nothing is rented."""
    run_id, position = app.runs.draft(caller.org_id, caller.actor, RunConfig(**body.model_dump()))
    settle(container, position)
    return _public(container, caller.org_id, run_id)


@router.get("", response_model=list[RunPublic])
def list_runs(caller: Reader, views: ViewsDep, container: ContainerDep) -> list[RunPublic]:
    now = container.clock.now()
    return [
        RunPublic(**present_run(doc, now)) for _, doc in views.list(RUNS, caller.org_id, "run:")
    ]


@router.get("/{run_id}", response_model=RunPublic)
def get_run(run_id: str, caller: Reader, container: ContainerDep) -> RunPublic:
    return _public(container, caller.org_id, run_id)


@router.patch("/{run_id}", response_model=RunPublic)
def update(
    run_id: str, body: RunCreate, caller: RunManager, app: AppDep, container: ContainerDep
) -> RunPublic:
    run_doc(container.views, caller.org_id, run_id)
    position = app.runs.update_draft(
        caller.org_id, run_id, caller.actor, RunConfig(**body.model_dump())
    )
    settle(container, position)
    return _public(container, caller.org_id, run_id)


@router.delete("/{run_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete(run_id: str, caller: RunManager, app: AppDep, container: ContainerDep) -> Response:
    run_doc(container.views, caller.org_id, run_id)
    settle(container, app.runs.discard_draft(caller.org_id, run_id, caller.actor))
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{run_id}/launch", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted)
def launch(
    run_id: str, body: LaunchIn, caller: RunManager, app: AppDep, container: ContainerDep
) -> Accepted:
    """R4: re-checks availability, price and balance now; the worker then creates one Pod."""
    run_doc(container.views, caller.org_id, run_id)
    position = app.runs.launch(
        caller.org_id, run_id, caller.actor, body.confirm, body.accepted_price_per_hour
    )
    return _accepted(
        container, caller, run_id, position, "launch confirmed; the Pod is being created"
    )


@router.post("/{run_id}/cancel", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted)
def cancel(run_id: str, caller: RunManager, app: AppDep, container: ContainerDep) -> Accepted:
    run_doc(container.views, caller.org_id, run_id)
    position = app.runs.cancel(caller.org_id, run_id, caller.actor)
    return _accepted(container, caller, run_id, position, "cancel requested")


@router.post(
    "/{run_id}/recovery/verify", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted
)
def recover_verify(
    run_id: str, caller: RunManager, app: AppDep, container: ContainerDep
) -> Accepted:
    """R9: verify the adapter saved on the network volume."""
    run_doc(container.views, caller.org_id, run_id)
    position = app.runs.recover_from_volume(caller.org_id, run_id, caller.actor)
    return _accepted(container, caller, run_id, position, "verifying the saved adapter")


@router.post(
    "/{run_id}/recovery/upload", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted
)
def recover_upload(
    run_id: str,
    caller: RunManager,
    app: AppDep,
    container: ContainerDep,
    file: Annotated[UploadFile, File(description="adapter.zip from /workspace/data/")],
) -> Accepted:
    """R10: custom S3 — upload adapter.zip retrieved from the Pod; it is stored, then verified."""
    run_doc(container.views, caller.org_id, run_id)
    data = file.file.read(MAX_UPLOAD + 1)
    if len(data) > MAX_UPLOAD:
        from domain.errors import DomainError

        raise DomainError("adapter.zip is larger than 512 MB", rule="upload")
    position = app.runs.recover_from_upload(caller.org_id, run_id, caller.actor, data)
    return _accepted(container, caller, run_id, position, "uploaded; verifying the adapter")


@router.post("/{run_id}/pod/resume", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted)
def resume(
    run_id: str, body: ResumeIn, caller: RunManager, app: AppDep, container: ContainerDep
) -> Accepted:
    """R11: GPU billing resumes; may fail for lack of capacity (the Pod then stays stopped)."""
    run_doc(container.views, caller.org_id, run_id)
    position = app.runs.resume_pod(caller.org_id, run_id, caller.actor, body.confirm_billing)
    return _accepted(
        container,
        caller,
        run_id,
        position,
        "Pod resumed: GPU billing has resumed. Reach it with basic SSH "
        "(ssh <podHostId>@ssh.runpod.io; no SCP/SFTP)",
    )


@router.post("/{run_id}/pod/release", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted)
def release(
    run_id: str, body: ReleaseIn, caller: RunManager, app: AppDep, container: ContainerDep
) -> Accepted:
    """R13: releasing an unverified Pod deletes the only copy of its files: confirm it."""
    run_doc(container.views, caller.org_id, run_id)
    position = app.runs.release_pod(
        caller.org_id, run_id, caller.actor, body.confirm_delete_unverified
    )
    return _accepted(container, caller, run_id, position, "release requested")


@router.get("/{run_id}/events", response_model=RunEvents)
def events(
    run_id: str,
    caller: Reader,
    views: ViewsDep,
    after: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> RunEvents:
    run_doc(views, caller.org_id, run_id)
    rows = views.list(
        RUNS, caller.org_id, f"event:{run_id}:", after=f"event:{run_id}:{after:06d}", limit=limit
    )
    items = [RunEvent(**doc) for _, doc in rows]
    return RunEvents(events=items, next_after=items[-1].version if items else after)
