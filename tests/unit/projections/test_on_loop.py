"""`projections.store.on_loop`: plain code run on the event loop, its awaits handed to the loop."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest

from projections.store.on_loop import awaiting, on_loop, run_on_loop

SEEN: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="outside")


def test_code_run_on_the_loop_gets_what_it_awaits_while_the_loop_runs_other_tasks() -> None:
    ticks: list[int] = []

    async def ticker() -> None:
        for i in range(5):
            ticks.append(i)
            await asyncio.sleep(0.01)

    def plain(x: int) -> tuple[int, bool, int]:
        got = awaiting(asyncio.sleep(0.1, result=x * 2))  # the ticker runs meanwhile
        return got, on_loop(), threading.get_ident()

    async def main() -> tuple[tuple[int, bool, int], int, list[int]]:
        tick = asyncio.create_task(ticker())
        result = await run_on_loop(plain, 21)
        during = list(ticks)
        await tick
        return result, threading.get_ident(), during

    (got, inside, thread), loop_thread, during = asyncio.run(main())
    assert (got, inside) == (42, True)
    assert thread == loop_thread  # no hand-off to another thread
    assert len(during) == 5  # the loop was not blocked while the code waited
    assert on_loop() is False


def test_interleaved_runs_each_resume_where_they_waited() -> None:
    def plain(name: str, delay: float) -> list[str]:
        out = [awaiting(asyncio.sleep(delay, result=f"{name}1"))]
        out.append(awaiting(asyncio.sleep(delay, result=f"{name}2")))
        return out

    async def main() -> list[list[str]]:
        return list(
            await asyncio.gather(run_on_loop(plain, "a", 0.03), run_on_loop(plain, "b", 0.01))
        )

    assert asyncio.run(main()) == [["a1", "a2"], ["b1", "b2"]]


def test_errors_surface_where_they_arise_and_context_variables_stay_inside() -> None:
    async def fails() -> None:
        raise KeyError("from the loop")

    def plain() -> str:
        SEEN.set("inside")
        with pytest.raises(KeyError):
            awaiting(fails())  # the awaited coroutine's error, raised in the plain code
        raise ValueError(SEEN.get())

    async def main() -> str:
        with pytest.raises(ValueError, match="inside"):
            await run_on_loop(plain)
        return SEEN.get()

    assert asyncio.run(main()) == "outside"


def test_a_cancelled_run_is_cancelled_where_it_waits() -> None:
    cleaned: list[str] = []
    waiting = threading.Event()

    def plain() -> None:
        try:
            waiting.set()
            awaiting(asyncio.sleep(10))
        finally:
            cleaned.append("finally ran")

    async def main() -> None:
        task = asyncio.create_task(run_on_loop(plain))
        while not waiting.is_set():  # cancelled where it waits, not before it started
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert cleaned == ["finally ran"]


def test_awaiting_outside_run_on_loop_is_refused() -> None:
    coro = asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="run_on_loop"):
        awaiting(coro)
    coro.close()
