"""Training log lines (R6): paged, and as Server-Sent Events until the run ends."""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from api.actions.runs import run_doc
from api.deps import Backend, Caller
from api.problems import InvalidRequest
from api.schemas.common import MAX_CURSOR
from api.schemas.runs import LogLine, LogPage, MetricPage, MetricPoint
from api.streams import StreamGate
from domain.run import TERMINAL
from domain.times import iso
from projections.views.runs import RUNS

POLL_S = 0.2
MAX_POLL_S = 1.0
MAX_STREAM_S = 6 * 3600


def _lines(page: tuple[list[dict[str, Any]], int]) -> list[dict[str, Any]]:
    return page[0]


def _next(page: tuple[list[dict[str, Any]], int], after: int) -> int:
    return int(page[1]) or after


def page(*, backend: Backend, caller: Caller, run_id: str, after: int, limit: int) -> LogPage:
    """Lines after the sequence number `after`, oldest first."""
    run_doc(backend.views, caller.org_id, run_id)
    found = backend.logs.read(run_id, after, limit)
    return LogPage(
        lines=[LogLine(**_present(x)) for x in _lines(found)], next_after=_next(found, after)
    )


def metrics(*, backend: Backend, caller: Caller, run_id: str, after: int, limit: int) -> MetricPage:
    """R17: the run's metric points kept after the cursor `after`, in the order they arrived."""
    run_doc(backend.views, caller.org_id, run_id)
    points, next_after = backend.logs.read_metrics(run_id, after, limit)
    return MetricPage(
        points=[MetricPoint(**point) for point in points], next_after=int(next_after) or after
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


async def stream(
    *,
    request: Request,
    backend: Backend,
    caller: Caller,
    run_id: str,
    last_event_id: str | None,
    after: int,
) -> StreamingResponse:
    """The run's lines and state changes as Server-Sent Events (the route's docstring says
    what a client sees), within the stream caps (`api.streams.StreamGate`)."""
    views, store = backend.views, backend.logs
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
                found = await run_in_threadpool(store.read, run_id, seq, 500)
                for raw in _lines(found):
                    line = _present(raw)
                    seq = line["seq"]
                    yield _sse("log", line, seq)
                doc = await run_in_threadpool(views.get, RUNS, caller.org_id, key)
                if doc is None:
                    return
                state = (doc["state"], doc["state_reason"])
                sent = bool(_lines(found)) or state != last_state
                if state != last_state:
                    last_state = state
                    yield _sse("state", {"state": state[0], "state_reason": state[1]})
                if doc["state"] in TERMINAL and not _lines(found):
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
