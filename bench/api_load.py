"""Load: `tensorant serve` in its own process, driven by wrk from another, against a bare endpoint.

    apt-get install wrk            # Debian's wrk 4.1 (the load generator; a separate process)
    uv run python bench/api_load.py                       # embedded SQLite and PostgreSQL
    uv run python bench/api_load.py --backend sqlite --seconds 5 --rounds 1

For each backend, in one run:
  1. seed: an organization (owner token), a RunPod connection and a network volume on the
     in-process sandbox, a project, a dataset version and `--runs` (100) draft runs, through the
     service layer built by `entrypoints.bootstrap`; then that process exits;
  2. `tensorant serve --sandbox` on the seeded data directory (and PostgreSQL schema) as its own
     process, with the defaults of a deployment (auth, views, INFO logging, embedded worker);
  3. a bare endpoint as its own process: Starlette on uvicorn, a psycopg pool of the API's view
     store size (8), one indexed query (the primary key of `view_docs`) per request, JSON out;
  4. wrk (`-t2 -c<concurrency> -d<seconds>s --latency`) against GET /v1/connections,
     GET /v1/runs (100 runs), GET /v1/runs/{id}, GET /v1/cleanup (a member's bearer token), the
     console's runs page GET /runs (100 runs; the session cookie a browser gets from signing in
     with the same token through the sign-in form), and against the bare endpoint.
Ratio = API requests/s ÷ the mean of the bare endpoint's requests/s measured just before and just
after it (target ≥ 0.6), p99 as wrk reports. `--rounds` (3) times over the
endpoints, in one run; each endpoint is judged on its median round, and every round is printed.
CPU ms = the server process's CPU time (all its threads, /proc) during the wrk run ÷ requests
served: what one request costs, less moved by the machine's other load than requests/s.
PG ms = the same for every PostgreSQL server process (on the embedded store: what the bare
endpoint's database and the API's idle PostgreSQL-free work leave, ~0).
`--profile DIR` runs py-spy (`uv run --with py-spy ...`) on the API process during each wrk run
and writes its samples as collapsed stacks, one file per endpoint.
The machine is usually shared: the ratio is what to read, run it more than once.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.sql import SQL, Identifier

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BARE = """
import os
from psycopg_pool import ConnectionPool
from starlette.applications import Starlette
from starlette.responses import Response
from starlette.routing import Route

pool = ConnectionPool(os.environ["BARE_URL"], min_size=8, max_size=8, open=True)
table = os.environ["BARE_TABLE"]
ORG = os.environ["BARE_ORG"]

def one(request):
    with pool.connection() as conn:
        row = conn.execute(
            f"SELECT doc::text FROM {table} WHERE view = %s AND org_id = %s AND key = %s",
            ("connections", ORG, "compute"),
            prepare=True,
        ).fetchone()
    return Response(row[0] if row else "null", media_type="application/json")

app = Starlette(routes=[Route("/one", one)])
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_http(url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(url, timeout=2).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer")


def seed(env: dict[str, str], runs: int) -> tuple[str, str, str]:
    """(org id, owner token, a run id), written through the services, then closed."""
    from decimal import Decimal

    from application.storage import BindVolume
    from domain.run_config import RunConfig
    from entrypoints.bootstrap import build_for_sandbox
    from entrypoints.settings import Settings
    from runpod_sandbox import Sandbox

    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with Sandbox(startup_seconds=0) as box:
            c = build_for_sandbox(Settings(), box)
            s = c.services
            creds: dict[str, Any] = box.credentials()
            vol = next(v for v in creds["volumes"] if v["dataCenterId"] == "EU-RO-1")
            org = s.organizations.create("Bench")
            token = s.organizations.add_member(org, "owner@bench.test", "owner").token
            s.connections.connect(org, "user:owner", creds["api_key"])
            s.storage.bind_volume(
                org,
                "user:owner",
                BindVolume(
                    vol["id"], "EU-RO-1", creds["s3_access_key_id"], creds["s3_secret_access_key"]
                ),
            )
            project, _ = s.projects.create(org, "user:owner", "bench bot")
            dv, _ = s.projects.register_dataset_version(
                org,
                project,
                "user:owner",
                name="chats",
                version="1",
                object_key="d/chats.jsonl",
                size_bytes=10,
                row_count=3,
                sha256="a" * 64,
            )
            cfg = RunConfig(
                project_id=project,
                dataset_version_id=dv,
                kind="trial",
                base_model="Qwen/Qwen2.5-0.5B-Instruct",
                gpu_type_id="NVIDIA A100 80GB PCIe",
                gpu_count=1,
                price_limit_per_hour=Decimal("3.00"),
                max_runtime_minutes=60,
            )
            run_id = ""
            for _ in range(runs):
                run_id = s.runs.draft(org, "user:member", cfg)[0]
            c.catch_up()
            c.close()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return org, token, run_id


def console_cookie(base: str, token: str) -> str:
    """Sign in as a browser does (GET /, then POST /signin with the page's CSRF token, from this
    origin): the session cookie the console's pages then take."""
    with httpx.Client(base_url=base) as browser:
        signin = browser.get("/")
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', signin.text)
        if csrf is None:
            raise RuntimeError("the sign-in page has no CSRF token")
        done = browser.post(
            "/signin",
            data={"csrf_token": csrf.group(1), "token": token},
            headers={"Origin": base},
        )
        if done.status_code != 303:
            raise RuntimeError(f"console sign-in answered {done.status_code}")
        session = browser.cookies.get("tensorant_session")
    if not session:
        raise RuntimeError("console sign-in set no session cookie")
    return f"tensorant_session={session}"


def cpu_seconds(pid: int) -> float:
    """User + system CPU the process (all its threads) has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def postgres_cpu_seconds() -> float:
    """User + system CPU of every PostgreSQL server process so far (its backends included)."""
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # the process ended meanwhile
        name, rest = text.split(" (", 1)[1].rsplit(")", 1)
        if name.startswith("postgres"):
            fields = rest.split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def wrk(
    url: str,
    header: str | None,
    server: int,
    args: argparse.Namespace,
    profile: Path | None = None,
) -> tuple[float, str, int, float, float]:
    """(requests/s, p99, non-2xx count, server CPU ms and PostgreSQL CPU ms per request) of
    `server` (a pid) under wrk; with `profile` (a file), py-spy samples the server meanwhile."""
    cmd = ["wrk", "-t2", f"-c{args.concurrency}", f"-d{args.seconds}s", "--latency", url]
    if header:
        cmd[1:1] = ["-H", header]
    spy = None
    if profile is not None:
        spy = subprocess.Popen(  # noqa: S603 - our own command
            [
                *("py-spy", "record", "--nonblocking", "--format", "raw", "--rate", "250"),
                *("--duration", str(args.seconds), "--pid", str(server), "-o", str(profile)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    cpu, pg = cpu_seconds(server), postgres_cpu_seconds()
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout  # noqa: S603
    cpu, pg = cpu_seconds(server) - cpu, postgres_cpu_seconds() - pg
    if spy is not None:
        spy.wait(30)
    rate = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    done = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    # The latency distribution's own line: a thread-stats column can end in "99%" too (69.99%).
    p99 = re.search(r"^\s+99%\s+(\S+)", out, re.MULTILINE)
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    per_request = 1000 * cpu / done if done else float("nan")
    pg_per_request = 1000 * pg / done if done else float("nan")
    bad_count = int(bad.group(1)) if bad else 0
    return rate, p99.group(1) if p99 else "?", bad_count, per_request, pg_per_request


def start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(  # noqa: S603 - our own commands
        cmd, env={**os.environ, **env}, cwd=ROOT, stdout=log.open("wb"), stderr=subprocess.STDOUT
    )


def stop(p: subprocess.Popen[bytes]) -> None:
    p.terminate()
    try:
        p.wait(20)
    except subprocess.TimeoutExpired:
        p.kill()


def seed_bare(pg_url: str, schema: str, org: str) -> None:
    """The bare endpoint's row in a schema of its own (when the API runs on SQLite)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(SQL("CREATE SCHEMA {}").format(Identifier(schema)))
        conn.execute(
            SQL(
                'CREATE TABLE {}.view_docs (view text COLLATE "C" NOT NULL,'
                " org_id text NOT NULL, key text NOT NULL, doc json NOT NULL,"
                " PRIMARY KEY (view, org_id, key))"
            ).format(Identifier(schema))
        )
        conn.execute(
            SQL("INSERT INTO {}.view_docs VALUES ('connections', %s, 'compute', %s)").format(
                Identifier(schema)
            ),
            (org, '{"status": "connected", "kind": "runpod"}'),
        )


def compare(
    backend: str,
    args: argparse.Namespace,
    bare_url: str,
    bare_pid: int,
    base: str,
    api_pid: int,
    endpoints: list[tuple[str, str, str]],
) -> None:
    """wrk on each endpoint, the bare endpoint measured before and after each: an endpoint is
    compared with the mean of its two neighbours (`bare/s`), since the machine's speed drifts
    within a run (a shared VM's CPU moved by up to 40% from one minute to the next). `--rounds`
    times over the endpoints; each endpoint is judged on its median round (a burst of the
    host's load can halve one 5-second wrk run of either side, old code or new)."""
    ratios: dict[str, list[float]] = {label: [] for label, _, _ in endpoints}
    p99s: dict[str, list[str]] = {label: [] for label, _, _ in endpoints}
    bare_before, p99, _, cpu, pg = wrk(bare_url, None, bare_pid, args)
    for round_ in range(1, args.rounds + 1):
        label = "bare Starlette+psycopg"
        print(
            f"{round_:<6}{backend:<9}{label:<32}{bare_before:>9.0f}{p99:>10}{'':>8}"
            f"{cpu:>8.2f}{pg:>8.2f}"
        )
        for label, path, header in endpoints:
            spy = None
            if args.profile is not None:
                name = re.sub(r"\W+", "_", f"{backend} {label} {round_}").strip("_")
                spy = args.profile / (name + ".txt")
            rate, p99, bad, cpu, pg = wrk(base + path, header, api_pid, args, spy)
            bare_after, bare_p99, _, bare_cpu, bare_pg = wrk(bare_url, None, bare_pid, args)
            around = (bare_before + bare_after) / 2
            bare_before = bare_after
            ratio = rate / around
            ratios[label].append(ratio)
            p99s[label].append(p99)
            note = f"  {bad} non-2xx" if bad else ""
            print(
                f"{round_:<6}{backend:<9}{label:<32}{rate:>9.0f}{p99:>10}{ratio:>8.2f}"
                f"{cpu:>8.2f}{pg:>8.2f}{around:>9.0f}{note}"
            )
            p99, cpu, pg = bare_p99, bare_cpu, bare_pg  # the next round's bare line
    print(f"{backend}: median of {args.rounds} round(s), target >= 0.6 of bare")
    for label, values in ratios.items():
        ratio = statistics.median(values)
        verdict = "PASS" if ratio >= 0.6 else "MISS"
        rounds = " ".join(f"{v:.2f}" for v in values)
        worst = max(p99s[label], key=_seconds)
        print(
            f"{backend:<9}{label:<32} median {ratio:5.2f}  {verdict}  (rounds: {rounds}; "
            f"p99 {' '.join(p99s[label])}, worst {worst})"
        )


def _seconds(p99: str) -> float:
    """wrk's latency text (`950.00us`, `22.08ms`, `1.02s`) in seconds (`?`: 0)."""
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", p99)
    if m is None:
        return 0.0
    scale = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0}[m.group(2)]
    return float(m.group(1)) * scale


def measure(backend: str, args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench_api_"))
    schema = f"bench_api_{uuid.uuid4().hex[:8]}"
    env = {"TENSORANT_DATA_DIR": str(tmp)}
    pg_url = args.database_url
    if backend == "postgres":
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(SQL("CREATE SCHEMA {}").format(Identifier(schema)))
        env["TENSORANT_DATABASE_URL"] = f"{pg_url}?schema={schema}"
    org, token, run_id = seed(env, args.runs)
    api_port, bare_port = free_port(), free_port()
    tensorant = shutil.which("tensorant", path=str(ROOT / ".venv" / "bin")) or "tensorant"
    api = start(
        [
            tensorant,
            "serve",
            "--port",
            str(api_port),
            "--sandbox",
            "--sandbox-port",
            str(free_port()),
        ],
        env,
        tmp / "serve.log",
    )
    # the bare endpoint reads PostgreSQL: the view of the PG run, or a seeded copy of the row
    bare_schema = schema if backend == "postgres" else f"{schema}_bare"
    if backend != "postgres":
        seed_bare(pg_url, bare_schema, org)
    (tmp / "bare.py").write_text(BARE)
    bare = start(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--app-dir",
            str(tmp),
            "bare:app",
            "--port",
            str(bare_port),
            "--log-level",
            "warning",
            "--no-access-log",
        ],
        {"BARE_URL": pg_url, "BARE_TABLE": f'"{bare_schema}".view_docs', "BARE_ORG": org},
        tmp / "bare.log",
    )
    try:
        wait_http(f"http://127.0.0.1:{api_port}/v1/connections")
        wait_http(f"http://127.0.0.1:{bare_port}/one")
        base = f"http://127.0.0.1:{api_port}"
        listed = httpx.get(f"{base}/v1/runs", headers={"Authorization": f"Bearer {token}"})
        n = len(listed.json())
        bearer = f"Authorization: Bearer {token}"
        cookie = f"Cookie: {console_cookie(base, token)}"
        page = httpx.get(f"{base}/runs", headers={"Cookie": cookie[len("Cookie: ") :]})
        shown = page.text.count("<tr data-run=")
        if page.status_code != 200 or shown != n:
            raise RuntimeError(f"console /runs answered {page.status_code} with {shown} runs")

        endpoints = [
            ("GET /v1/connections", "/v1/connections", bearer),
            (f"GET /v1/runs ({n} runs)", "/v1/runs", bearer),
            ("GET /v1/runs/{id}", f"/v1/runs/{run_id}", bearer),
            ("GET /v1/cleanup", "/v1/cleanup", bearer),
            (f"console GET /runs ({n} runs)", "/runs", cookie),
        ]
        compare(
            backend, args, f"http://127.0.0.1:{bare_port}/one", bare.pid, base, api.pid, endpoints
        )
    finally:
        stop(api)
        stop(bare)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            for name in {schema, bare_schema}:
                conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(name)))
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp} (serve.log, bare.log)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3, help="each endpoint's median is judged")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--keep", action="store_true", help="keep the data directory and logs")
    parser.add_argument(
        "--profile",
        type=Path,
        help="a directory: py-spy (on PATH) samples the API during each wrk run, collapsed stacks",
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: apt-get install wrk")
    if args.profile is not None:
        if shutil.which("py-spy") is None:
            sys.exit("--profile needs py-spy: uv run --with py-spy python bench/api_load.py ...")
        args.profile.mkdir(parents=True, exist_ok=True)
    print(f"wrk -t2 -c{args.concurrency} -d{args.seconds}s; ratio = API req/s / bare req/s")
    print(
        f"{'round':<6}{'backend':<9}{'endpoint':<32}{'req/s':>9}{'p99':>10}{'ratio':>8}"
        f"{'CPU ms':>8}{'PG ms':>8}{'bare/s':>9}"
    )
    for backend in ["sqlite", "postgres"] if args.backend == "both" else [args.backend]:
        measure(backend, args)


if __name__ == "__main__":
    main()
