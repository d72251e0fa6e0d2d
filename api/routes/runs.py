"""Training runs (R1–R13): drafts, confirmed launch, cancel, recovery, resume, release, history."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, File, Query, Response, UploadFile, status
from fastapi.responses import FileResponse, RedirectResponse
from starlette.background import BackgroundTask

from api.actions import adapters, runs
from api.deps import BackendDep, Caller, Reader, ReaderToken, RunManager, read_as
from api.responses import json_response
from api.run_list import presented_runs, runs_json
from api.schemas.common import AUTHENTICATED, MAX_CURSOR
from api.schemas.runs import (
    Accepted,
    LaunchIn,
    ReleaseIn,
    ResumeIn,
    RunCreate,
    RunEvents,
    RunPublic,
)

router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=AUTHENTICATED)


@router.post("", status_code=status.HTTP_201_CREATED, response_model=RunPublic)
def create(body: RunCreate, caller: RunManager, backend: BackendDep) -> RunPublic:
    """R1–R3: save a draft; nothing is rented."""
    return runs.create(backend=backend, caller=caller, body=body)


@router.get("", response_model=list[RunPublic])
async def get_runs(sent: ReaderToken, backend: BackendDep) -> Response:
    # The clock and the trainer callbacks from the backend, not as dependencies of their own:
    # each dependency FastAPI solves per request costs CPU (profiled under wrk).
    def shown(caller: Caller) -> list[tuple[RunPublic, bytes]]:
        now = backend.clock.now()
        return presented_runs(backend.views, caller.org_id, now, backend.services.report_reads)

    return Response(runs_json(await read_as(backend, sent, shown)), media_type="application/json")


@router.get("/{run_id}", response_model=RunPublic)
async def read_run(run_id: str, sent: ReaderToken, backend: BackendDep) -> Response:
    """The run; `progress` (with the channel it came by, `via`) and `stalled_since` (nothing
    arrived on any channel for the configured time while the Pod runs) come from its reports."""
    found = await read_as(
        backend, sent, lambda caller: runs.run(backend=backend, caller=caller, run_id=run_id)
    )
    return json_response(RunPublic, found)


@router.patch("/{run_id}", response_model=RunPublic)
def update(run_id: str, body: RunCreate, caller: RunManager, backend: BackendDep) -> RunPublic:
    return runs.update(backend=backend, caller=caller, run_id=run_id, body=body)


@router.delete("/{run_id}", status_code=status.HTTP_204_NO_CONTENT)
def delete(run_id: str, caller: RunManager, backend: BackendDep) -> Response:
    runs.discard(backend=backend, caller=caller, run_id=run_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post("/{run_id}/launch", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted)
def launch(run_id: str, body: LaunchIn, caller: RunManager, backend: BackendDep) -> Accepted:
    """R4: re-checks availability, price and balance now; the worker then creates one Pod."""
    return runs.launch(backend=backend, caller=caller, run_id=run_id, body=body)


@router.post("/{run_id}/cancel", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted)
def cancel(run_id: str, caller: RunManager, backend: BackendDep) -> Accepted:
    return runs.cancel(backend=backend, caller=caller, run_id=run_id)


@router.get(
    "/{run_id}/adapter",
    response_class=FileResponse,
    responses={
        200: {"content": {"application/zip": {}}, "description": "the verified adapter.zip"},
        307: {"description": "custom S3: a presigned GET that lives minutes"},
    },
)
def adapter(run_id: str, caller: RunManager, backend: BackendDep) -> Response:
    """R19: the run's verified adapter. Its bytes (checked against the sha256 the run shows; the
    `X-Adapter-SHA256` header repeats it), or on custom S3 a redirect to a presigned GET."""
    found = adapters.download(backend=backend, caller=caller, run_id=run_id)
    headers = {"X-Adapter-SHA256": found.sha256, "Cache-Control": "no-store"}
    if found.url is not None:
        return RedirectResponse(found.url, status_code=307, headers=headers)
    assert found.path is not None
    path = found.path
    return FileResponse(
        path,
        media_type="application/zip",
        filename=found.filename,
        headers=headers,
        background=BackgroundTask(path.unlink, missing_ok=True),
    )


@router.post(
    "/{run_id}/recovery/verify", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted
)
def recover_verify(run_id: str, caller: RunManager, backend: BackendDep) -> Accepted:
    """R9: verify the adapter saved on the network volume."""
    return runs.recover_from_volume(backend=backend, caller=caller, run_id=run_id)


@router.post(
    "/{run_id}/recovery/upload", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted
)
def recover_upload(
    run_id: str,
    caller: RunManager,
    backend: BackendDep,
    file: Annotated[UploadFile, File(description="adapter.zip from /workspace/data/")],
) -> Accepted:
    """R10: custom S3 — upload adapter.zip retrieved from the Pod; it is stored, then verified."""
    # Starlette spooled the upload to a temporary file: it is hashed and stored in chunks.
    return runs.recover_from_upload(
        backend=backend, caller=caller, run_id=run_id, adapter_zip=file.file
    )


@router.post("/{run_id}/pod/resume", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted)
def resume(run_id: str, body: ResumeIn, caller: RunManager, backend: BackendDep) -> Accepted:
    """R11: GPU billing resumes; may fail for lack of capacity (the Pod then stays stopped)."""
    return runs.resume(backend=backend, caller=caller, run_id=run_id, body=body)


@router.post("/{run_id}/pod/release", status_code=status.HTTP_202_ACCEPTED, response_model=Accepted)
def release(run_id: str, body: ReleaseIn, caller: RunManager, backend: BackendDep) -> Accepted:
    """R13: releasing an unverified Pod deletes the only copy of its files: confirm it."""
    return runs.release(backend=backend, caller=caller, run_id=run_id, body=body)


@router.get("/{run_id}/events", response_model=RunEvents)
def events(
    run_id: str,
    caller: Reader,
    backend: BackendDep,
    after: Annotated[int, Query(ge=0, le=MAX_CURSOR)] = 0,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
) -> RunEvents:
    return runs.history(backend=backend, caller=caller, run_id=run_id, after=after, limit=limit)
