"""Plain (sync) read code run on the event loop, its PostgreSQL round trips awaited there.

A GET's reads are a few round trips of well under a millisecond. Handing them to a thread
(`run_in_threadpool`) costs more than that under load: the hand-off, the wake-up of a worker
thread and the GIL passed back and forth while libpq waits (bench/api_load.py: on
PostgreSQL a request cost 0.8-1.4 ms of server CPU in the threadpool and 0.8 read on the loop).
Blocking the loop on the database instead would stop every other request while one waits.

`run_on_loop(fn)` runs `fn` in a greenlet (the bridge SQLAlchemy's asyncio support uses);
a `LoopWaiting` connection used inside it (`Connection.wait` is where psycopg waits for its
socket) hands the wait to the loop (`psycopg.waiting.wait_async`) and the greenlet is
suspended meanwhile, so the loop serves other requests. Outside a bridge, a `LoopWaiting`
connection waits as any psycopg connection does: the same pool serves threads too.
"""

from __future__ import annotations

import contextvars
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from greenlet import getcurrent, greenlet
from psycopg import Connection, waiting
from psycopg.abc import PQGen

R = TypeVar("R")
RV = TypeVar("RV")

_WAIT_INTERVAL = 0.1  # psycopg's own (`psycopg.connection._WAIT_INTERVAL`)


class _Bridge(greenlet):  # type: ignore[misc]  # greenlet's class is not typed as a base
    """The greenlet `run_on_loop` runs sync code in; its parent is the loop's task."""


def on_loop() -> bool:
    """True inside `run_on_loop`: a wait may be handed to the loop (`awaiting`)."""
    return isinstance(getcurrent(), _Bridge)


def awaiting(awaitable: Awaitable[RV]) -> RV:
    """Inside `run_on_loop`: suspend this code until the loop has awaited `awaitable`, and
    return its result (or raise its exception, a cancellation included)."""
    bridge = getcurrent()
    if not isinstance(bridge, _Bridge):
        raise RuntimeError("awaiting() is for code that run_on_loop() runs")
    result: RV = bridge.parent.switch(awaitable)
    return result


async def run_on_loop(fn: Callable[..., R], *args: Any) -> R:
    """`fn(*args)` on the running loop: each `awaiting` inside it is awaited here, and the loop
    runs other tasks meanwhile. Context variables set inside stay inside (a copy of ours)."""
    bridge = _Bridge(fn, getcurrent())
    bridge.gr_context = contextvars.copy_context()
    result: Any = bridge.switch(*args)
    while not bridge.dead:
        try:
            value = await result
        except BaseException:  # thrown into `fn`, where it surfaces
            result = bridge.throw(*sys.exc_info())
        else:
            result = bridge.switch(value)
    return result  # type: ignore[no-any-return]


class LoopWaiting(Connection[Any]):
    """A psycopg connection whose waits for the server go to the event loop inside
    `run_on_loop`, and block as usual anywhere else."""

    def wait(
        self, gen: PQGen[RV], interval: float = _WAIT_INTERVAL, timeout: float | None = None
    ) -> RV:
        if not on_loop():
            return super().wait(gen, interval, timeout)
        return awaiting(
            waiting.wait_async(gen, self.pgconn.socket, interval=interval, timeout=timeout)
        )
