"""The API on uvicorn: in a background thread on a loopback port (demo, tests, bench), and over
the RunPod sandbox."""

from __future__ import annotations

import asyncio
import gc
import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from api.app import create_app
from entrypoints.bootstrap import Container, build_for_sandbox
from entrypoints.settings import Settings


def bounded_http(header_timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (httptools) with a deadline for a request's headers:
    a connection that has not sent a whole request head `header_timeout_s` after it opened, or
    after its previous response, is closed (uvicorn bounds their size, not their time)."""

    class BoundedHttp(HttpToolsProtocol):
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm_header_deadline()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._arm_header_deadline()

        def _arm_header_deadline(self) -> None:
            self.loop.call_later(header_timeout_s, self._header_deadline, self.cycle)

        def _header_deadline(self, cycle: object) -> None:
            # No new request began since the timer was armed, and none is in flight.
            idle = self.cycle is cycle and (cycle is None or self.cycle.response_complete)
            if idle and not self.transport.is_closing():
                self.transport.close()

    return BoundedHttp


# The collector's youngest-generation threshold in a serving process (CPython's default: 700).
GC_YOUNG_THRESHOLD = 10_000


def settle_gc() -> None:
    """Tune the cyclic collector for serving, once start-up is done. Profiled under wrk
    (bench/api_load.py, GET /v1/connections, 16 connections, PostgreSQL): with the defaults,
    every full collection walked the ~200,000 objects of start-up (the app, its models, the
    views, the sandbox), and a request's reference cycles (Starlette's and FastAPI's exception
    handling, its AsyncExitStack) outlived two young collections while requests were in flight,
    so full collections of 50-190 ms ran about once a second and set the p99 (140-170 ms
    against a p50 of 14 ms). Freezing start-up's objects takes them out of every collection;
    a larger young generation lets a finished request's cycles die young. p99 fell to 25 ms and
    requests/s rose by ~10% (the same as with the collector off)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(GC_YOUNG_THRESHOLD, middle, old)


class Server(uvicorn.Server):
    """uvicorn's server that, when told to stop, first ends the app's log streams:
    uvicorn's graceful shutdown waits for responses in flight, and a stream never finishes.
    A deployment's server (`settles_gc`) tunes the collector once it has started (`settle_gc`);
    one that shares a process (the tests' `ServerThread`) leaves the process's collector alone."""

    def __init__(self, config: uvicorn.Config, *, settles_gc: bool = False) -> None:
        super().__init__(config)
        self.settles_gc = settles_gc

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.settles_gc and self.started:
            settle_gc()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        app = self.config.app
        streams = getattr(getattr(app, "state", None), "streams", None)
        if streams is not None:
            streams.close()
        await super().shutdown(sockets)


class ServerThread:
    """`with ServerThread(app) as s: ...` serves on s.base_url; port 0 picks a free one."""

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
        header_timeout_s: float = 10.0,
    ) -> None:
        self.app = app
        self.header_timeout_s = header_timeout_s
        self.host = host
        self.requested_port = port
        self.port: int | None = None
        self.log_level = log_level
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 20.0) -> ServerThread:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, self.requested_port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.app,
            log_level=self.log_level,
            access_log=False,
            proxy_headers=False,  # N7: X-Forwarded-For is read by api/client_address.py
            timeout_graceful_shutdown=2,
            http=bounded_http(self.header_timeout_s),
        )
        self._server = Server(config)
        self._thread = threading.Thread(
            target=self._server.run,
            kwargs={"sockets": [sock]},
            daemon=True,
            name=f"api-{self.port}",
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if not self._thread.is_alive():
                raise RuntimeError("the API server failed to start (see the log above)")
            if time.monotonic() > deadline:
                raise RuntimeError("the API server did not start in time")
            time.sleep(0.005)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        self._server = self._thread = None

    def __enter__(self) -> ServerThread:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def serve_with_sandbox(
    settings: Settings,
    sandbox: Any,
    *,
    reactions: dict[str, bool] | None = None,
    **overrides: Any,
) -> tuple[ServerThread, Container]:
    """The API on a free loopback port over the RunPod sandbox (demo, e2e and chaos tests).

    The sandbox's trainer calls back to this server, whose port is known only once bound, so the
    container is built at start-up with that URL. `reactions` starts the broker's worker and
    relay in-process when a broker URL is set (what `tensorant worker`/`projector` run); with the
    embedded broker the app starts them itself. Returns the started server and its container.
    """
    built: list[Container] = []
    server: ServerThread

    def build() -> Container:
        live = settings.model_copy(update={"public_url": server.base_url, **overrides})
        container = build_for_sandbox(live, sandbox)
        if reactions is not None:
            container.start_reactions(**reactions)
        built.append(container)
        return container

    server = ServerThread(
        create_app(build, run_projectors=settings.api_projectors),
        header_timeout_s=settings.header_read_timeout_s,
    )
    server.start()
    return server, built[0]


def console_hint(base_url: str, how: str = "a member token") -> str:
    """What `serve` and the demo print: where the web console is and how to sign in."""
    return (
        f"Web console: {base_url}/ — open it in a browser and sign in by pasting "
        f"{how} once (owners make tokens with `tensorant admin add-member`)"
    )
