"""Training log lines (R6): paged, and as Server-Sent Events until the run ends."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from api.deps import LogsDep, Reader, ViewsDep
from api.problems import InvalidRequest
from api.routes.runs import run_doc
from api.schemas.common import AUTHENTICATED, MAX_CURSOR
from api.schemas.runs import LogLine, LogPage
from api.streams import StreamGate
from domain.run import TERMINAL
from domain.times import iso
from projections.views.runs import RUNS

router = APIRouter(prefix="/v1/runs", tags=["runs"], responses=AUTHENTICATED)
POLL_S = 0.2
MAX_POLL_S = 1.0
MAX_STREAM_S = 6 * 3600


def _lines(page: tuple[list[dict[str, Any]], int]) -> list[dict[str, Any]]:
    return page[0]


def _next(page: tuple[list[dict[str, Any]], int], after: int) -> int:
    return int(page[1]) or after


@router.get("/{run_id}/logs", response_model=LogPage)
def logs(
    run_id: str,
    caller: Reader,
    views: ViewsDep,
    store: LogsDep,
    after: Annotated[int, Query(ge=0, le=MAX_CURSOR)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 200,
) -> LogPage:
    run_doc(views, caller.org_id, run_id)
    page = store.read(run_id, after, limit)
    return LogPage(
        lines=[LogLine(**_present(x)) for x in _lines(page)], next_after=_next(page, after)
    )


def _present(line: dict[str, Any]) -> dict[str, Any]:
    t = line["time"]
    return {
        "seq": line["seq"],
        "text": line["text"],
        "time": t if isinstance(t, str) else iso(t),
    }


_EVENT_ID = re.compile(r"^[0-9]{1,19}$")


def _last_event_id(value: str) -> int:
    """The `id:` of the last event a reconnecting client saw: one of our sequence numbers."""
    if not _EVENT_ID.match(value) or int(value) > MAX_CURSOR:
        raise InvalidRequest("Last-Event-ID must be a sequence number this stream sent")
    return int(value)


def _sse(event: str, data: dict[str, Any], event_id: int | None = None) -> str:
    head = f"id: {event_id}\n" if event_id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data)}\n\n"


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
    views: ViewsDep,
    store: LogsDep,
    last_event_id: Annotated[str | None, Header()] = None,
    after: Annotated[int, Query(ge=0, le=MAX_CURSOR)] = 0,
) -> StreamingResponse:
    """`log` events carry lines, `state` events state changes; the stream ends with the run.

    Asynchronous: an idle stream holds no thread, a disconnect ends it at once, and a comment
    line every `keepalive_s` keeps proxies from closing it. At most so many streams are open
    per caller, organization and server (429 beyond), and all of them end on shutdown.
    """
    await run_in_threadpool(run_doc, views, caller.org_id, run_id)
    start = after if last_event_id is None else _last_event_id(last_event_id)
    gate: StreamGate = request.app.state.streams
    lease = gate.acquire(caller.user_id, caller.org_id)
    key = f"run:{run_id}"

    async def events() -> AsyncIterator[str]:
        try:
            seq, last_state = start, None
            now = time.monotonic()
            deadline, quiet_since, wait = now + MAX_STREAM_S, now, POLL_S
            while time.monotonic() < deadline:
                page = await run_in_threadpool(store.read, run_id, seq, 500)
                for raw in _lines(page):
                    line = _present(raw)
                    seq = line["seq"]
                    yield _sse("log", line, seq)
                doc = await run_in_threadpool(views.get, RUNS, caller.org_id, key)
                if doc is None:
                    return
                state = (doc["state"], doc["state_reason"])
                sent = bool(_lines(page)) or state != last_state
                if state != last_state:
                    last_state = state
                    yield _sse("state", {"state": state[0], "state_reason": state[1]})
                if doc["state"] in TERMINAL and not _lines(page):
                    yield _sse("end", {"state": doc["state"]})
                    return
                now = time.monotonic()
                if sent:
                    quiet_since, wait = now, POLL_S
                else:  # a quiet run is looked at less often, up to once a second
                    wait = min(wait * 2, MAX_POLL_S)
                    if now - quiet_since >= gate.limits.keepalive_s:
                        quiet_since = now
                        yield ": keep-alive\n\n"
                if not await gate.pause(wait):
                    return  # the server is shutting down: the client reconnects elsewhere
        finally:
            lease.release()

    body = events()
    gate.bind(lease, body)
    return StreamingResponse(
        body, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )
