"""`read_as`: a read made as the caller a token resolved to before is answered only as the caller
the token's check names now (the guess lets the read travel with the check on PostgreSQL)."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any, cast

import pytest
from starlette.requests import Request

from api.deps import Backend, Bearer, Caller, read_as
from api.problems import Unauthenticated
from api.throttle import Throttle
from domain.errors import NotFound
from projections.store.base import Doc, Follow


class _Views:
    """The members index and roster of one token, as a store would answer them."""

    local_reads = True

    def __init__(self) -> None:
        self.member: Doc | None = {"user_id": "u1", "organization_id": "o1"}
        self.roster: Doc | None = {"email": "a@example.com", "role": "member"}

    def one_connection(self) -> AbstractContextManager[None]:
        return nullcontext()

    async def read_async(self, read: Any, *args: Any) -> Any:
        return read(*args)

    def get_followed_later(self, view: str, org_id: str, key: str, follow: Follow) -> Any:
        member, roster = self.member, self.roster  # the check, as it was sent
        return lambda: (member, roster)


def _call(views: _Views, token: str, read: Any) -> Any:
    app = SimpleNamespace(state=SimpleNamespace(auth_throttle=Throttle("authentications")))
    request = Request({"type": "http", "app": app, "client": ("10.0.0.1", 1), "headers": []})
    backend = cast(Backend, SimpleNamespace(views=views, clock=SimpleNamespace(now=_now)))
    coroutine = read_as(backend, Bearer(request, token, "read"), read)
    # A thread of its own: a browser test may have left this thread's event loop running.
    with ThreadPoolExecutor(1) as one:
        return one.submit(asyncio.run, coroutine).result()


def _now() -> datetime:
    return datetime.now(UTC)


def test_a_read_made_as_a_caller_who_changed_is_made_again_as_who_they_are_now() -> None:
    views, token = _Views(), f"tnt_{uuid.uuid4().hex}"
    seen: list[str] = []

    def read(caller: Caller) -> str:
        seen.append(caller.role)
        return caller.role

    assert _call(views, token, read) == "member"
    assert _call(views, token, read) == "member"
    assert seen == ["member", "member"]  # the second: as the guess, and it held
    views.roster = {"email": "a@example.com", "role": "auditor"}
    assert _call(views, token, read) == "auditor"
    assert seen[2:] == ["member", "auditor"]  # the guess's answer is dropped


def test_a_failed_read_as_a_guess_answers_401_when_the_token_no_longer_works() -> None:
    views, token = _Views(), f"tnt_{uuid.uuid4().hex}"
    assert _call(views, token, lambda caller: caller.org_id) == "o1"

    def missing(caller: Caller) -> str:
        raise NotFound("run r not found")

    with pytest.raises(NotFound):  # the token works: the read's own answer
        _call(views, token, missing)
    views.member = None  # removed
    with pytest.raises(Unauthenticated):
        _call(views, token, missing)
    with pytest.raises(Unauthenticated):  # and the guess is gone: no read is made at all
        _call(views, token, lambda caller: pytest.fail("read as a removed member"))
