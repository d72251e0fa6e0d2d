"""Load: the API's GET /v1/connections and POST /v1/projects vs a bare Starlette endpoint.

Both servers run in this process on the same Container (same PostgreSQL pools, same views,
same command); the bare one skips FastAPI, auth, validation, response models and middleware.
The load generator (httpx, asyncio) runs here too, so absolute figures are conservative; the
ratio is what matters.

    uv run python bench/api_load.py [--seconds 5] [--concurrency 16]
        [--database-url postgresql://postgres@127.0.0.1:5432/test]

Not part of pytest.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.sql import SQL, Identifier
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from api.app import create_app
from entrypoints.bootstrap import Container, build_for_sandbox
from entrypoints.server import ServerThread
from entrypoints.settings import Settings
from projections.views.connections import CONNECTIONS
from projections.views.projects import PROJECTS
from runpod_sandbox import Sandbox


def bare_app(container: Container, org_id: str) -> Starlette:
    """The same reads and the same command, without the framework around them."""

    def connections(request: Request) -> JSONResponse:
        views = container.views
        return JSONResponse(
            {
                "compute": views.get(CONNECTIONS, org_id, "compute"),
                "storage": views.get(CONNECTIONS, org_id, "storage"),
            }
        )

    async def projects(request: Request) -> JSONResponse:
        name = (await request.json())["name"]

        def run() -> Any:
            pid, position = container.services.projects.create(org_id, "bench", name)
            container.wait_for(position)
            return container.views.get(PROJECTS, org_id, f"project:{pid}")

        from starlette.concurrency import run_in_threadpool

        return JSONResponse(await run_in_threadpool(run), status_code=201)

    # The GET handler is sync, like the API's: Starlette runs it in the same threadpool.
    return Starlette(
        routes=[Route("/connections", connections), Route("/projects", projects, methods=["POST"])]
    )


async def load(
    url: str, method: str, headers: dict[str, str], *, seconds: float, concurrency: int, expect: int
) -> tuple[float, list[float], int]:
    latencies: list[float] = []
    errors = 0
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(headers=headers, limits=limits, timeout=30) as client:

        async def worker() -> None:
            nonlocal errors
            while time.perf_counter() < deadline:
                body = {"name": f"p-{uuid.uuid4().hex[:8]}"} if method == "POST" else None
                t0 = time.perf_counter()
                r = await client.request(method, url, json=body)
                latencies.append(time.perf_counter() - t0)
                if r.status_code != expect:
                    errors += 1

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - start
    return len(latencies) / elapsed, latencies, errors


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] * 1000 if len(values) > 1 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args()

    schema = f"bench_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(args.database_url, autocommit=True) as conn:
        conn.execute(SQL("CREATE SCHEMA {}").format(Identifier(schema)))
    try:
        with tempfile.TemporaryDirectory() as tmp, Sandbox() as sandbox:
            settings = Settings(
                data_dir=Path(tmp), database_url=f"{args.database_url}?schema={schema}"
            )
            container = build_for_sandbox(settings, sandbox)
            creds = sandbox.credentials()
            with ServerThread(create_app(lambda: container, owns_container=False)) as api:
                org_id = container.services.organizations.create("Bench")
                token = container.services.organizations.add_member(
                    org_id, "bench@example.com", "owner"
                ).token
                container.catch_up()
                auth = {"Authorization": f"Bearer {token}"}
                with httpx.Client(base_url=api.base_url, headers=auth, timeout=30) as c:
                    c.post("/v1/connections/runpod", json={"api_key": creds["api_key"]})
                    c.put(
                        "/v1/storage",
                        json={
                            "kind": "runpod_volume",
                            "volume_id": "nv7eu1ro4k",
                            "datacenter_id": "EU-RO-1",
                            "access_key_id": creds["s3_access_key_id"],
                            "secret_access_key": creds["s3_secret_access_key"],
                        },
                    ).raise_for_status()
                    # The first project locks the storage; later ones touch only themselves.
                    c.post("/v1/projects", json={"name": "first"}).raise_for_status()
                with ServerThread(bare_app(container, org_id)) as bare:
                    cases = [
                        (
                            "GET /v1/connections",
                            "GET",
                            f"{api.base_url}/v1/connections",
                            f"{bare.base_url}/connections",
                            200,
                        ),
                        (
                            "POST /v1/projects",
                            "POST",
                            f"{api.base_url}/v1/projects",
                            f"{bare.base_url}/projects",
                            201,
                        ),
                    ]
                    print(
                        f"PostgreSQL, {args.concurrency} concurrent clients, "
                        f"{args.seconds:.0f} s per run"
                    )
                    print(
                        f"{'endpoint':22} {'server':8} {'req/s':>8} {'p50 ms':>8} "
                        f"{'p99 ms':>8} {'errors':>6}"
                    )
                    for label, method, api_url, bare_url, expect in cases:
                        rates = {}
                        for server, url, headers in (
                            ("bare", bare_url, {}),
                            ("api", api_url, auth),
                        ):
                            rate, lat, errors = asyncio.run(
                                load(
                                    url,
                                    method,
                                    headers,
                                    seconds=args.seconds,
                                    concurrency=args.concurrency,
                                    expect=expect,
                                )
                            )
                            rates[server] = rate
                            print(
                                f"{label:22} {server:8} {rate:8.0f} {pct(lat, 50):8.1f} "
                                f"{pct(lat, 99):8.1f} {errors:6d}"
                            )
                        print(f"{label:22} ratio api/bare = {rates['api'] / rates['bare']:.2f}")
            container.close()
    finally:
        with psycopg.connect(args.database_url, autocommit=True) as conn:
            conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(schema)))


if __name__ == "__main__":
    main()
