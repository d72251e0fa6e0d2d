"""Training log lines (R6): paged, and as Server-Sent Events until the run ends."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from api.actions import logs as log_lines
from api.deps import BackendDep, Reader
from api.schemas.common import AUTHENTICATED, MAX_CURSOR
from api.schemas.runs import LogPage, MetricPage

router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=AUTHENTICATED)


@router.get("/{run_id}/logs", response_model=LogPage)
def logs(
    run_id: str,
    caller: Reader,
    backend: BackendDep,
    after: Annotated[int, Query(ge=0, le=MAX_CURSOR)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> LogPage:
    return log_lines.page(backend=backend, caller=caller, run_id=run_id, after=after, limit=limit)


@router.get("/{run_id}/metrics", response_model=MetricPage)
def metrics(
    run_id: str,
    caller: Reader,
    backend: BackendDep,
    after: Annotated[int, Query(ge=0, le=MAX_CURSOR)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 500,
) -> MetricPage:
    """R17: every progress point of the run's training (step, epoch, loss, eval_loss,
    learning_rate, grad_norm, tokens_per_s, time), oldest first; `next_after` pages on."""
    return log_lines.metrics(
        backend=backend, caller=caller, run_id=run_id, after=after, limit=limit
    )


@router.get(
    "/{run_id}/logs/stream",
    response_class=StreamingResponse,
    responses={
        200: {"content": {"text/event-stream": {}}},
        429: {"description": "Too many open streams (per caller, organization or server)"},
    },
)
async def stream(
    request: Request,
    run_id: str,
    caller: Reader,
    backend: BackendDep,
    last_event_id: Annotated[str | None, Header()] = None,
    after: Annotated[int, Query(ge=0, le=MAX_CURSOR)] = 0,
) -> StreamingResponse:
    """`log` events carry lines, `state` events state changes; the stream ends with the run.

    Asynchronous: an idle stream holds no thread, a disconnect ends it at once, and a comment
    line every `keepalive_s` keeps proxies from closing it. At most so many streams are open
    per caller, organization and server (429 beyond), and all of them end on shutdown.
    """
    return await log_lines.stream(
        request=request,
        backend=backend,
        caller=caller,
        run_id=run_id,
        last_event_id=last_event_id,
        after=after,
    )
