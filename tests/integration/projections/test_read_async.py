"""`ViewStore.read_async`: a coroutine's reads (the API's GETs), the same answers on both stores;
on PostgreSQL awaited on the event loop, in a thread when no connection is free."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from projections.store.base import Follow, ViewStore
from projections.store.pg import pinned_to
from projections.store.postgres import PostgresViewStore
from tests.integration.projections.conftest import World

FOLLOW = Follow("roster", "org", "member:", "user")


def _seed(store: ViewStore) -> None:
    with store.batch("index") as b:
        b.put("_", "h1", {"org": "o1", "user": "u1"})
    with store.batch("roster") as b:
        b.put("o1", "member:u1", {"role": "owner", "big": 2**70, "ratio": 0.1})
        b.put("o1", "member:u2", {"role": "member"})


def _request_reads(store: ViewStore) -> dict[str, Any]:
    """What a GET reads: a check held back and sent with the next read, on one connection."""
    with store.one_connection():
        check = store.get_followed_later("index", "_", "h1", FOLLOW)
        many = store.get_many("roster", "o1", ["member:u1", "member:u2", "member:none"])
        return {"check": check(), "many": many, "thread": threading.get_ident()}


def test_a_coroutines_reads_answer_as_the_same_reads_in_plain_code(world: World) -> None:
    store = world.store
    _seed(store)

    async def main() -> tuple[dict[str, Any], int]:
        return await store.read_async(_request_reads, store), threading.get_ident()

    answer, loop_thread = asyncio.run(main())
    expected = _request_reads(store)
    assert answer["check"] == expected["check"]
    assert answer["many"] == expected["many"]
    # numbers beyond 64 bits come back as the integers they were, not floats
    assert answer["many"]["member:u1"]["big"] == 2**70
    assert type(answer["many"]["member:u1"]["big"]) is int
    if world.kind == "sqlite":  # local reads: on the loop, no round trip to wait for
        assert answer["thread"] == loop_thread


def _slow_read(store: PostgresViewStore, seconds: float) -> int:
    pinned = pinned_to(store.pool)
    assert pinned is not None  # read_async pinned the connection this read runs on
    pinned.conn.execute("SELECT pg_sleep(%s)", (seconds,))
    return threading.get_ident()


@pytest.mark.postgres
@pytest.mark.parametrize("world", ["postgres"], indirect=True)
def test_on_postgresql_a_coroutines_round_trips_are_awaited_on_the_loop(world: World) -> None:
    """Two reads that each wait 0.4 s on the server, from one loop: both run on the loop's own
    thread (no hand-off), they overlap, and the loop keeps serving meanwhile."""
    store = world.store
    assert isinstance(store, PostgresViewStore)
    ticks: list[float] = []

    async def ticker(until: float) -> None:
        while time.monotonic() < until:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.02)

    async def main() -> tuple[list[int], int, float]:
        started = time.monotonic()
        tick = asyncio.create_task(ticker(started + 0.3))
        threads = await asyncio.gather(
            store.read_async(_slow_read, store, 0.4), store.read_async(_slow_read, store, 0.4)
        )
        elapsed = time.monotonic() - started
        await tick
        return list(threads), threading.get_ident(), elapsed

    # Both reads find a connection free at once: two are open and idle first. (A warm-up
    # run of `main` could not do it: while the pool still opens a connection, a read goes to
    # a thread, as the next test shows, which `_slow_read` refuses.)
    opened = [store.pool.getconn(timeout=10) for _ in range(2)]
    for conn in opened:
        store.pool.putconn(conn)
    threads, loop_thread, elapsed = asyncio.run(main())
    assert threads == [loop_thread, loop_thread]
    assert elapsed < 0.75  # one after the other would be 0.8 s
    assert len(ticks) >= 8  # the loop was never blocked for the reads' 0.4 s


@pytest.mark.postgres
@pytest.mark.parametrize("world", ["postgres"], indirect=True)
def test_on_postgresql_with_no_free_connection_a_coroutines_reads_go_to_a_thread(
    world: World,
) -> None:
    """Waiting on the loop for a connection would block every request: when none is free at
    once, the reads go to a worker thread, which waits for one."""
    store = world.store
    assert isinstance(store, PostgresViewStore)
    _seed(store)
    held = [store.pool.getconn() for _ in range(store.pool.max_size)]

    async def main() -> tuple[dict[str, Any], int]:
        asyncio.get_running_loop().call_later(0.2, lambda: [store.pool.putconn(c) for c in held])
        return await store.read_async(_request_reads, store), threading.get_ident()

    answer, loop_thread = asyncio.run(main())
    assert answer["thread"] != loop_thread
    assert answer["many"]["member:u2"] == {"role": "member"}


@pytest.mark.postgres
@pytest.mark.parametrize("world", ["postgres"], indirect=True)
def test_on_postgresql_a_failed_or_cancelled_read_gives_its_connection_back(
    world: World,
) -> None:
    store = world.store
    assert isinstance(store, PostgresViewStore)
    _seed(store)

    def fails() -> None:
        pinned = pinned_to(store.pool)
        assert pinned is not None
        pinned.conn.execute("SELECT 1 / 0")

    async def main() -> dict[str, Any]:
        for _ in range(store.pool.max_size + 1):  # more than the pool holds: none is lost
            with pytest.raises(Exception, match="division by zero"):
                await store.read_async(fails)
        slow = asyncio.create_task(store.read_async(_slow_read, store, 5))
        await asyncio.sleep(0.2)  # fixed-sleep-ok: cancelled part-way, whenever
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        return await store.read_async(_request_reads, store)

    started = time.monotonic()
    answer = asyncio.run(main())
    assert answer["many"]["member:u1"]["role"] == "owner"
    assert time.monotonic() - started < 4  # the cancelled read did not wait out its 5 s
    assert store.pool.get_stats().get("pool_size", 0) <= store.pool.max_size


def test_held_back_reads_of_other_values_answer_for_their_own_values(world: World) -> None:
    """Bound parameters are kept by value (`_bound_args`): each read gets its own keys' docs."""
    store = world.store
    _seed(store)
    with store.batch("flags") as b:
        b.put("o1", "1", {"n": "one"})
        b.put("o1", "True", {"n": "true"})
    for _ in range(3):
        with store.one_connection():
            u1 = store.get_later("roster", "o1", "member:u1")
            u2 = store.get_later("roster", "o1", "member:u2")
            many = store.get_many_later("flags", "o1", ["1"])
            other = store.get_many_later("flags", "o1", ["True"])
            assert store.get("roster", "o1", "member:none") is None
            assert (u1() or {}).get("role") == "owner"
            assert u2() == {"role": "member"}
            assert many() == {"1": {"n": "one"}}
            assert other() == {"True": {"n": "true"}}
