"""What one deployment holds as a whole: N organizations, their runs, on PostgreSQL + RabbitMQ.

    uv run python bench/scale.py --quick                      # 3 organizations, 3 runs, ~1 min
    uv run python bench/scale.py --orgs 10 --runs 10
    uv run python bench/scale.py --orgs 1000 --runs 1000 --workers 2 --apis 1

Every piece is its own process: the RunPod sandbox (with its simulated trainer; each
organization has its own tenant key, so its own Pods and RunPod quota), `--workers` `tensorant
worker`s, one `tensorant projector` (views, outbox relay, the reconcile ticker) and `--apis`
`tensorant serve`s, on a private PostgreSQL schema and RabbitMQ queue. This process seeds the
organizations (through the services: not what is measured), launches the runs through the API as
users do, then is the load generator: virtual users read run pages and poll logs of live runs,
probes poll a sample of runs' logs to time each line from the Pod's print to the run page. The
trainer reports at the real trainer's pace by default (a progress report and a log report every
`--step-seconds` = 5 s, TENSORANT_PROGRESS_SECONDS; `--chatter` plain lines per step, as a
progress bar prints) through the Pod's log and the mailbox (callbacks go nowhere unless
`--callbacks`), for `--steps` steps, then exports.

It reports: each reconcile pass's duration against the interval, RunPod calls per key per minute
against the REST v2 spec's example quota (60/min, 3,000/h; the sandbox enforces them, a 429
counts as a refusal), report lag p50/p99, projector lag, API p50/p99 per kind of request,
event-store appends/s, database connections held by the control plane, and the CPU and memory of
each process (the sandbox's apart), per live run. Every run must succeed and every line its
trainer printed must be on its run page at the end (`lost` otherwise).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.sql import SQL, Identifier

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PROTOCOL = "SCALE-CHILD "
AMQP = "amqp://guest:guest@127.0.0.1:5672/%2F"
GPU = "NVIDIA A100 80GB PCIe"
PRICE = "3.00"
SPEC_QUOTA = {"minute": 60, "hour": 3000, "day": 50_000}  # REST v2 spec's example quotas
CHATS = b"".join(
    b'{"messages": [{"role": "user", "content": "Where is my order %d?"}, '
    b'{"role": "assistant", "content": "It ships tomorrow."}]}\n' % i
    for i in range(3)
)
FRESH_S = 5.0  # a probe takes a run launched at most this long ago (its launch answered then)
SETTLED = ("succeeded", "failed", "cancelled", "needs_recovery")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.0f}"


# ---------------------------------------------------------------- the sandbox, its own process


def sandbox_child(step_s: float, steps: int, chatter: int) -> None:
    """The sandbox with its simulated trainer; stdout: one JSON hello, then one answer per
    `stats` on stdin; `quit` ends it."""
    import runpod_sandbox.trainer as simulated
    from runpod_sandbox import Sandbox

    simulated.TOTAL_STEPS = steps  # the simulated trainer's run length, read per run
    box = Sandbox(startup_seconds=2.0, trainer_step_seconds=step_s, trainer_chatter=chatter)
    box.start()
    box.model.add_credit(10_000_000)
    box.model.spend_limit = Decimal(10**9)  # the seeded $80/h would stop at ~27 A100 Pods
    box.model.settle_every_s = 1.0  # a thousand Pods' charges booked on every call was its CPU
    box.model.log_poll_max_s = 0.5  # a thousand quiet log streams each woken every 50 ms too
    box.set_faults(
        rate_limit_per_minute=SPEC_QUOTA["minute"],
        rate_limit_per_hour=SPEC_QUOTA["hour"],
        rate_limit_per_day=SPEC_QUOTA["day"],
    )
    limiter = box.model.rate_limiter
    calls: Counter[tuple[str, int]] = Counter()  # (key, minute) -> calls
    refused: Counter[str] = Counter()
    guard = threading.Lock()
    check = limiter.check

    def counted(key: str, faults: Any, client: str = "") -> Any:
        decision = check(key, faults, client)
        with guard:
            calls[(key, int(time.time() // 60))] += 1
            if not decision.allowed:
                refused[key] += 1
        return decision

    limiter.check = counted  # type: ignore[method-assign]
    print(PROTOCOL + json.dumps({"base_url": box.base_url, "credentials": box.credentials()}))
    sys.stdout.flush()
    try:
        for command in sys.stdin:
            if command.strip() != "stats":
                break
            with guard:
                per_key: dict[str, list[int]] = defaultdict(list)
                for (key, _minute), n in calls.items():
                    per_key[key].append(n)
                body = {
                    "keys": len(per_key),
                    "max_per_minute": max((max(v) for v in per_key.values()), default=0),
                    "total": sum(calls.values()),
                    "minutes": len({m for _k, m in calls}),
                    "refused": sum(refused.values()),
                    "keys_refused": len(refused),
                }
            print(PROTOCOL + json.dumps(body), flush=True)
    finally:
        box.stop()


class Child:
    def __init__(self, args: argparse.Namespace) -> None:
        self.proc = subprocess.Popen(  # noqa: S603 - this very file, by our own interpreter
            [
                sys.executable,
                __file__,
                "--sandbox-child",
                f"{args.step_seconds}",
                f"{args.steps}",
                f"{args.chatter}",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.hello = self.read()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(PROTOCOL):
                body: dict[str, Any] = json.loads(line.removeprefix(PROTOCOL))
                return body
        raise RuntimeError("the sandbox child ended")

    def stats(self) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write("stats\n")
        self.proc.stdin.flush()
        return self.read()

    def stop(self) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write("quit\n")
            self.proc.stdin.close()
            self.proc.wait(15)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------- process accounting


def proc_cpu(pid: int) -> float:
    """utime + stime of a process (all its threads), seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@dataclass
class Server:
    role: str
    proc: subprocess.Popen[bytes]
    log: Path
    port: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spawn(role: str, args: list[str], env: dict[str, str], logs: Path) -> Server:
    log = logs / f"{role}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(  # noqa: S603 - our own CLI, by our own interpreter
            [sys.executable, "-c", "from entrypoints.cli import main; main()", *args],
            env={**env, "PGAPPNAME": f"tensorant-scale-{role}"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return Server(role, proc, log)


# ---------------------------------------------------------------- seeding


@dataclass
class Org:
    id: str
    token: str
    project: str
    dataset: str
    runs: list[str] = field(default_factory=list)


def seed_orgs(c: Any, base_url: str, creds: dict[str, Any], n: int, threads: int) -> list[Org]:
    """N organizations, each with its tenant key, its own network volume (made through REST
    v2, as its owner would: organizations sharing one volume queued on its one bucket), a
    project and a dataset (through the services, in parallel: set-up, not measured)."""
    from application.storage import BindVolume
    from runpod_sandbox.tenants import key_for

    s = c.services

    def one(i: int) -> Org:
        key = key_for(creds["api_key"], f"org{i}")
        made = httpx.post(
            f"{base_url}/v2/network-volumes",
            json={"name": f"scale-{i}", "size": 10, "dataCenter": "EU-RO-1"},
            headers={"Authorization": f"Bearer {key}"},
            timeout=60,
        )
        made.raise_for_status()
        org = s.organizations.create(f"Scale org {i}")
        s.organizations.add_member(org, f"owner{i}@scale.test", "owner")
        token = s.organizations.add_member(org, f"member{i}@scale.test", "member").token
        s.connections.connect(org, "user:owner", key)
        s.storage.bind_volume(
            org,
            "user:owner",
            BindVolume(
                made.json()["id"],
                "EU-RO-1",
                creds["s3_access_key_id"],
                creds["s3_secret_access_key"],
            ),
        )
        project, _ = s.projects.create(org, "user:owner", f"bot {i}")
        dv, _ = s.projects.upload_dataset(
            org, project, "user:owner", name="chats", version="1", source=_bytes(CHATS)
        )
        return Org(org, token, project, dv)

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, range(n)))


def _bytes(data: bytes) -> Any:
    import io

    return io.BytesIO(data)


# ---------------------------------------------------------------- the load generator


@dataclass
class Samples:
    api: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    errors: Counter[str] = field(default_factory=Counter)
    lag: list[float] = field(default_factory=list)
    guard: threading.Lock = field(default_factory=threading.Lock)

    def timed(
        self, kind: str, client: httpx.Client, path: str, headers: dict[str, str]
    ) -> httpx.Response | None:
        t0 = time.perf_counter()
        try:
            r = client.get(path, headers=headers)
        except httpx.HTTPError as e:
            with self.guard:
                self.errors[f"{kind}: {type(e).__name__}"] += 1
            return None
        took = time.perf_counter() - t0
        with self.guard:
            self.api[kind].append(took)
            if r.status_code >= 400:
                self.errors[f"{kind}: HTTP {r.status_code}"] += 1
        return r


def parse_time(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class Load:
    """Virtual users (a run page and its new log lines, then think time) and lag probes."""

    def __init__(self, apis: list[str], orgs: list[Org], args: argparse.Namespace) -> None:
        self.apis, self.orgs, self.args = apis, orgs, args
        self.samples = Samples()
        self.stop = threading.Event()
        self.live: set[str] = set()
        self.owner: dict[str, Org] = {r: o for o in orgs for r in o.runs}
        self.fresh: list[tuple[float, str]] = []  # (launched at, run) no probe took, newest last
        self.guard = threading.Lock()
        self.clients = [
            httpx.Client(
                base_url=a, timeout=30, limits=httpx.Limits(max_connections=args.users + 32)
            )
            for a in apis
        ]
        self.threads: list[threading.Thread] = []

    def headers(self, run_id: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.owner[run_id].token}"}

    def client(self) -> httpx.Client:
        return random.choice(self.clients)

    def launched(self, run_id: str, org: Org) -> None:
        with self.guard:
            self.owner[run_id] = org
            self.live.add(run_id)
            self.fresh.append((time.monotonic(), run_id))

    def set_live(self, live: set[str]) -> None:
        with self.guard:
            self.live = live

    def start(self) -> None:
        for i in range(self.args.users):
            self.threads.append(threading.Thread(target=self.user, args=(i,), daemon=True))
        for _ in range(self.args.probes):
            self.threads.append(threading.Thread(target=self.probe, daemon=True))
        for t in self.threads:
            t.start()

    def user(self, i: int) -> None:
        rng = random.Random(i)
        after: dict[str, int] = {}
        while not self.stop.wait(rng.uniform(0.5, 1.5) * self.args.think_seconds):
            live = list(self.live)
            if not live:
                continue
            run_id = rng.choice(live)
            h, c = self.headers(run_id), self.client()
            self.samples.timed("run page", c, f"/v1/runs/{run_id}", h)
            a = after.get(run_id, 0)
            r = self.samples.timed("run logs", c, f"/v1/runs/{run_id}/logs?after={a}", h)
            if r is not None and r.status_code == 200:
                after[run_id] = int(r.json()["next_after"])
            if rng.random() < 0.1:  # now and then the runs list
                self.samples.timed("runs list", c, "/v1/runs", h)

    def probe(self) -> None:
        """Follow runs from their launch to their end, one after another (the newest launched
        that no probe took), polling each one's logs every `--probe-seconds`: lag = first seen -
        the line's time (the trainer's report time, or the Pod log's for a plain line). A run
        is taken at its launch, so every line it prints is timed from then, whenever in the
        tier it ran."""
        while not self.stop.is_set():
            with self.guard:
                launched_at, run_id = self.fresh.pop() if self.fresh else (0.0, None)
                if time.monotonic() - launched_at > FRESH_S:
                    # launched a while ago (all probes were busy): its first lines were
                    # printed before any probe looked, so its lag would be the probes' own
                    self.fresh.clear()
                    run_id = None
            if run_id is None:
                self.stop.wait(self.args.probe_seconds)
                continue
            self.follow(run_id)

    def follow(self, run_id: str) -> None:
        after, h, c = 0, self.headers(run_id), self.client()
        last = False
        while not self.stop.wait(self.args.probe_seconds):
            last = run_id not in self.live  # one more look after its end, then the next run
            try:
                r = c.get(f"/v1/runs/{run_id}/logs?after={after}", headers=h)
            except httpx.HTTPError:
                continue
            if r.status_code != 200:
                continue
            now = time.time()
            body = r.json()
            with self.samples.guard:
                self.samples.lag.extend(now - parse_time(x["time"]) for x in body["lines"])
            after = int(body["next_after"])
            if last:
                return

    def close(self) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(5)
        for c in self.clients:
            c.close()


# ---------------------------------------------------------------- database probes


class Database:
    def __init__(self, url: str, schema: str) -> None:
        self.url, self.schema = url, schema
        for attempt in range(30):  # the server is shared: its connections may be all taken
            try:
                self.conn = psycopg.connect(url, autocommit=True)
                break
            except psycopg.OperationalError:
                if attempt == 29:
                    raise
                time.sleep(1)

    def connections(self) -> int:
        row = self.conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE 'tensorant-scale-%%'"
        ).fetchone()
        return int(row[0]) if row else 0

    def table_with(self, column: str, like: str) -> str | None:
        """The schema's table named `like` that has `column` (the event store's
        `notification_id`, the views' tracking `position`)."""
        row = self.conn.execute(
            "SELECT table_name FROM information_schema.columns WHERE table_schema = %s"
            " AND column_name = %s AND table_name LIKE %s ORDER BY table_name LIMIT 1",
            (self.schema, column, like),
        ).fetchone()
        return str(row[0]) if row else None

    def max_notification(self) -> int:
        events = self.table_with("notification_id", "%_events")
        if events is None:
            return 0
        row = self.conn.execute(
            SQL("SELECT coalesce(max(notification_id), 0) FROM {}").format(
                Identifier(self.schema, events)
            )
        ).fetchone()
        return int(row[0]) if row else 0

    def lines_written(self) -> int:
        """Log lines the report store has numbered (all runs)."""
        try:
            row = self.conn.execute(
                SQL("SELECT coalesce(sum(last_seq), 0) FROM {}").format(
                    Identifier(self.schema, "run_log_heads")
                )
            ).fetchone()
        except psycopg.Error:
            return 0
        return int(row[0]) if row else 0

    def run_states(self) -> dict[str, str]:
        """Every run's state in the runs view (what run pages show). The bench reads it here:
        asking each organization's runs list every two seconds cost the API more than its
        users at a thousand organizations."""
        docs = self.table_with("doc", "%view_docs")
        if docs is None:
            return {}
        rows = self.conn.execute(
            SQL(
                "SELECT doc->>'id', doc->>'state' FROM {} WHERE view = 'runs' AND key LIKE 'run:%%'"
            ).format(Identifier(self.schema, docs))
        ).fetchall()
        return {str(i): str(st) for i, st in rows if i}

    def projected(self) -> int:
        """The position of the view run pages read (`runs`)."""
        tracking = self.table_with("position", "%view_tracking")
        if tracking is None:
            return 0
        row = self.conn.execute(
            SQL("SELECT max(position) FROM {} WHERE view = 'runs'").format(
                Identifier(self.schema, tracking)
            )
        ).fetchone()
        return int(row[0]) if row and row[0] is not None else 0


# ---------------------------------------------------------------- one tier


@dataclass
class Tier:
    orgs: int
    runs: int
    workers: int
    apis: int
    load: str = ""
    passes: list[tuple[float, int]] = field(default_factory=list)  # (seconds, live runs)
    states: Counter[str] = field(default_factory=Counter)
    lost: int = 0
    expected_lines: int = 0
    runpod: dict[str, Any] = field(default_factory=dict)
    lag: list[float] = field(default_factory=list)
    projector_lag: list[int] = field(default_factory=list)
    api: dict[str, list[float]] = field(default_factory=dict)
    api_errors: dict[str, int] = field(default_factory=dict)
    appends_per_s: float = 0.0
    lines_per_s: float = 0.0  # log lines the report store wrote
    connections_max: int = 0
    cpu: dict[str, float] = field(default_factory=dict)  # role -> CPU s in the window
    rss: dict[str, float] = field(default_factory=dict)  # role -> max RSS MiB
    window_s: float = 0.0
    live_mean: float = 0.0
    set_up_s: float = 0.0  # the launches, from the first to the last answer
    unlaunched: int = 0
    live_max: int = 0
    notes: list[str] = field(default_factory=list)


def reconcile_passes(logs: Path) -> list[tuple[float, int]]:
    found: list[tuple[float, int]] = []
    for path in sorted(logs.glob("worker-*.log")):
        for line in path.read_text(errors="replace").splitlines():
            if "reconcile pass" not in line:
                continue
            try:
                doc = json.loads(line)
                found.append((float(doc["pass_s"]), int(doc["live_runs"])))
            except (ValueError, KeyError):
                continue
    return found


def expected_texts(steps: int, chatter: int) -> int:
    """Lines each run's page must hold at the end: its trainer's starting line and three log
    reports, per step its progress bar and a log report, the adapter's line."""
    return 1 + 3 + steps * (chatter + 1) + 1


def run_tier(args: argparse.Namespace) -> Tier:  # noqa: PLR0912, PLR0915 - one tier, start to end
    from adapters.vault import new_master_key_text
    from entrypoints.bootstrap import SystemClock, build, sandbox_settings
    from entrypoints.settings import Settings

    tier = Tier(args.orgs, args.runs, args.workers, args.apis)
    tier.load = "load average at start: " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    schema = f"scale_{uuid.uuid4().hex[:8]}"
    logs = Path(tempfile.mkdtemp(prefix="scale_logs_"))
    print(f"schema {schema}; process logs in {logs}", flush=True)
    with psycopg.connect(args.database_url, autocommit=True) as conn:
        conn.execute(SQL("CREATE SCHEMA {}").format(Identifier(schema)))
    child = Child(args)
    servers: list[Server] = []
    c = None
    load = None
    try:
        creds = child.hello["credentials"]
        base = str(child.hello["base_url"])
        template = str(creds["s3_endpoint_template"])
        db = f"{args.database_url}?schema={schema}"
        master = new_master_key_text()
        data_dir = Path(tempfile.mkdtemp(prefix="scale_data_"))
        followers = math.ceil(args.runs / args.workers) + 8
        env = {
            **os.environ,
            "TENSORANT_DATABASE_URL": db,
            "TENSORANT_BROKER_URL": AMQP,
            "TENSORANT_QUEUE_NAME": f"scale_{schema}",
            "TENSORANT_RUNPOD_API_BASE_URL": base,
            "TENSORANT_RUNPOD_S3_ENDPOINT_TEMPLATE": template,
            "TENSORANT_S3_ALLOW_ENDPOINTS": template.split("{dc}", maxsplit=1)[0],
            "TENSORANT_HF_ENDPOINT": str(creds["hub_url"]),
            "TENSORANT_MASTER_KEY": master,
            "TENSORANT_DATA_DIR": str(data_dir),
            "TENSORANT_POD_LOG_FOLLOWERS": str(followers),
            "TENSORANT_RECONCILE_INTERVAL": str(args.reconcile_interval),
            "TENSORANT_RECONCILE_THREADS": str(args.reconcile_threads),
            "TENSORANT_RECONCILE_SHARDS": str(args.reconcile_shards or args.workers),
            "TENSORANT_RECONCILE_IDLE_EVERY": str(args.idle_every),
            # the projector process keeps the views; the APIs' CPU goes to requests
            "TENSORANT_API_PROJECTORS": "false",
            "TENSORANT_LOG_FORMAT": "json",
            "TENSORANT_LOG_LEVEL": "INFO",
            # PostgreSQL here has max_connections 100, shared with other work: each process
            # keeps `--db-pool` connections per pool (see the report's connections held).
            "TENSORANT_DB_POOL_SIZE": str(args.db_pool),
            "TENSORANT_STREAM_LIMIT_TOTAL": "100000",
            "TENSORANT_STREAM_LIMIT_PER_ORG": "1000",
        }
        api_ports = [free_port() for _ in range(args.apis)]
        callback = f"http://127.0.0.1:{api_ports[0]}" if args.callbacks else "http://127.0.0.1:9"
        env["TENSORANT_PUBLIC_URL"] = callback  # port 9: refused, reports go by logs and mailbox
        settings = Settings(
            data_dir=data_dir,
            database_url=db,
            broker_url=AMQP,
            master_key=master,
            queue_name=f"scale_{schema}",
            log_level="WARNING",
            db_pool_size=args.db_pool,
        )
        remote = _Remote(base, creds)
        c = build(sandbox_settings(settings, remote), clock=SystemClock())
        t0 = time.perf_counter()
        orgs = seed_orgs(c, base, creds, args.orgs, args.seed_threads)
        print(f"seeded {len(orgs)} organizations in {time.perf_counter() - t0:.1f} s", flush=True)
        c.close()  # its pools' connections: the deployment's processes need them
        c = None
        db_probe = Database(args.database_url, schema)
        servers.append(spawn("projector", ["projector"], env, logs))
        for i in range(args.workers):
            servers.append(spawn(f"worker-{i}", ["worker"], env, logs))
        for i in range(args.apis):
            # Chosen just before the start: a port chosen minutes earlier was taken meanwhile.
            port = api_ports[i] = free_port()
            if i == 0 and args.callbacks:
                env["TENSORANT_PUBLIC_URL"] = f"http://127.0.0.1:{port}"
            s = spawn(f"api-{i}", ["serve", "--port", str(port)], env, logs)
            s.port = port
            servers.append(s)
        apis = [s for s in servers if s.port]
        for s in apis:
            wait_http(f"{s.url}/healthz", 300, s)
        # Drafts through the services (set-up), launches through the API (as users do).
        config = {
            "kind": "trial",
            "base_model": "Qwen/Qwen2.5-0.5B-Instruct",
            "gpu_type_id": GPU,
            "gpu_count": 1,
            "price_limit_per_hour": PRICE,
            "max_runtime_minutes": 60,
        }
        plan = [orgs[i % len(orgs)] for i in range(args.runs)]
        http = httpx.Client(timeout=120, limits=httpx.Limits(max_connections=64))

        load = Load([s.url for s in apis], orgs, args)

        def launch(org: Org) -> str:
            api = random.choice(apis)
            auth = {"Authorization": f"Bearer {org.token}"}
            body = {**config, "project_id": org.project, "dataset_version_id": org.dataset}
            for _ in range(30):
                d = http.post(f"{api.url}/v1/runs", json=body, headers=auth)
                if d.status_code == 201:
                    break
                time.sleep(1)
            else:
                raise RuntimeError(f"draft answered {d.status_code}: {d.text[:300]}")
            run_id = str(d.json()["id"])
            for _ in range(30):
                try:
                    t = time.perf_counter()
                    r = http.post(
                        f"{api.url}/v1/runs/{run_id}/launch",
                        json={"confirm": True, "accepted_price_per_hour": PRICE},
                        headers={"Authorization": f"Bearer {org.token}"},
                    )
                except httpx.TimeoutException:
                    # Slow, not refused: the launch may have taken effect (a second one is a
                    # conflict). The run is followed as launched; the tier's notes count these.
                    slow_launches.append(run_id)
                    r = None
                if r is None or r.status_code == 202:
                    if r is not None:
                        with load.samples.guard:
                            load.samples.api["launch"].append(time.perf_counter() - t)
                    org.runs.append(run_id)
                    load.launched(run_id, org)
                    return run_id
                time.sleep(1)
            said = "" if r is None else f"{r.status_code}: {r.text[:300]}"
            raise RuntimeError(f"launch of {run_id} answered {said}")

        slow_launches: list[str] = []
        launch_errors: list[str] = []

        def launch_all() -> None:
            t0 = time.perf_counter()

            def one(org: Org) -> None:
                try:
                    launch(org)
                except Exception as e:  # counted: the tier fails its "every run" verdict
                    launch_errors.append(str(e)[:200])

            with ThreadPoolExecutor(args.seed_threads) as pool:
                list(pool.map(one, plan))
            tier.set_up_s = time.perf_counter() - t0
            print(f"launched {len(load.owner)} runs in {tier.set_up_s:.1f} s", flush=True)

        # The load runs from the first launch: users and probes meet the launches' load too,
        # and a probe times a run's lines from its launch, whenever in the tier it runs.
        load.start()
        launcher = threading.Thread(target=launch_all, name="launches", daemon=True)
        cpu0 = {s.role: proc_cpu(s.proc.pid) for s in servers}
        cpu0["sandbox"] = proc_cpu(child.proc.pid)
        cpu0["load generator"] = time.process_time()
        n0, w0 = db_probe.max_notification(), time.perf_counter()
        l0 = db_probe.lines_written()
        launcher.start()
        live_samples: list[tuple[float, int]] = []
        states: dict[str, str] = {}
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            time.sleep(2)
            states.update(db_probe.run_states())
            launched = list(load.owner)
            live = {r for r in launched if states.get(r) not in SETTLED}
            load.set_live(live)
            # Weighted by time: a poll takes longer when many runs are live.
            live_samples.append((time.perf_counter(), len(live)))
            tier.connections_max = max(tier.connections_max, db_probe.connections())
            head = db_probe.max_notification()
            tier.projector_lag.append(max(0, head - db_probe.projected()))
            for s in servers:
                tier.rss[s.role] = max(tier.rss.get(s.role, 0.0), proc_rss_mib(s.proc.pid))
            tier.rss["sandbox"] = max(tier.rss.get("sandbox", 0.0), proc_rss_mib(child.proc.pid))
            dead = [s.role for s in servers if s.proc.poll() is not None]
            if dead:
                tier.notes.append(f"processes ended early: {dead}")
                break
            if not live and not launcher.is_alive():
                break
            print(
                f"  {time.strftime('%H:%M:%S')} launched {len(launched)}, live {len(live)}, "
                f"settled {len(launched) - len(live)}",
                flush=True,
            )
        launcher.join(60)
        run_ids = list(load.owner)
        owner = dict(load.owner)
        if slow_launches:
            tier.notes.append(f"{len(slow_launches)} launches answered after the client's timeout")
        if launch_errors:
            tier.notes.append(f"{len(launch_errors)} runs not launched: {launch_errors[0]}")
        tier.unlaunched = len(plan) - len(run_ids)
        tier.window_s = time.perf_counter() - w0
        tier.appends_per_s = (db_probe.max_notification() - n0) / tier.window_s
        tier.lines_per_s = (db_probe.lines_written() - l0) / tier.window_s
        tier.cpu = {s.role: proc_cpu(s.proc.pid) - cpu0[s.role] for s in servers}
        tier.cpu["sandbox"] = proc_cpu(child.proc.pid) - cpu0["sandbox"]
        tier.cpu["load generator"] = time.process_time() - cpu0["load generator"]
        points = [(w0, 0), *live_samples]
        area = sum((b[0] - a[0]) * a[1] for a, b in itertools.pairwise(points))
        tier.live_mean = area / (points[-1][0] - w0) if len(points) > 1 else 0.0
        tier.live_max = max((n for _, n in live_samples), default=0)
        load.close()
        tier.runpod = child.stats()
        tier.states = Counter(states.get(r, "unknown") for r in run_ids)
        tier.lag, tier.api = load.samples.lag, dict(load.samples.api)
        tier.api_errors = dict(load.samples.errors)
        tier.passes = reconcile_passes(logs)
        tier.expected_lines = expected_texts(args.steps, args.chatter)
        tier.lost = count_lost(http, apis, owner, run_ids, tier.expected_lines)
        http.close()
    finally:
        if load is not None:
            load.close()
        for s in servers:
            if s.proc.poll() is None:
                s.proc.send_signal(signal.SIGTERM)
        for s in servers:
            try:
                s.proc.wait(20)
            except subprocess.TimeoutExpired:
                s.proc.kill()
                s.proc.wait()
        if c is not None:
            c.close()
        child.stop()
        if not args.keep:
            with psycopg.connect(args.database_url, autocommit=True) as conn:
                conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(schema)))
            delete_queue(f"scale_{schema}")
    return tier


class _Remote:
    """What `sandbox_settings` needs of a sandbox in another process."""

    def __init__(self, base_url: str, creds: dict[str, Any]) -> None:
        self.base_url = base_url
        self._creds = creds

    def credentials(self) -> dict[str, Any]:
        return self._creds


def wait_http(url: str, timeout: float, server: Server) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            raise RuntimeError(f"{server.role} ended: see {server.log}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError(f"{server.role} did not answer {url} in {timeout:.0f} s")


def count_lost(
    http: httpx.Client, apis: list[Server], owner: dict[str, Org], run_ids: list[str], want: int
) -> int:
    """Lines each trainer printed that its run page lacks (all runs, read to the end)."""

    def one(run_id: str) -> int:
        after, texts = 0, 0
        headers = {"Authorization": f"Bearer {owner[run_id].token}"}
        while True:
            r = http.get(
                f"{random.choice(apis).url}/v1/runs/{run_id}/logs?after={after}&limit=500",
                headers=headers,
            )
            body = r.json()
            texts += len(body["lines"])
            if not body["lines"]:
                break
            after = int(body["next_after"])
        return max(0, want - texts)

    with ThreadPoolExecutor(8) as pool:
        return sum(pool.map(one, run_ids))


def delete_queue(name: str) -> None:
    try:
        import pika

        conn = pika.BlockingConnection(pika.URLParameters(AMQP))
        ch = conn.channel()
        for q in (name, f"{name}.DQ", f"{name}.XQ"):
            ch.queue_delete(q)
        conn.close()
    except Exception as e:  # leftovers only
        print(f"(queue {name} not deleted: {e})")


# ---------------------------------------------------------------- the report


def report(t: Tier, args: argparse.Namespace) -> dict[str, Any]:
    control = {k: v for k, v in t.cpu.items() if k not in ("sandbox", "load generator")}
    control_cpu = sum(control.values())
    live_s = max(t.live_mean, 1e-9) * t.window_s
    per_run_ms = control_cpu * 1000 / live_s if live_s else float("nan")
    passes = [p for p, _ in t.passes]
    over = sum(1 for p in passes if p > args.reconcile_interval)
    run_pages = t.api.get("run page", [])
    out = {
        "orgs": t.orgs,
        "runs": t.runs,
        "workers": t.workers,
        "apis": t.apis,
        "load": t.load,
        "end_load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "window_s": round(t.window_s, 1),
        "live_mean": round(t.live_mean, 1),
        "live_max": t.live_max,
        "launches_s": round(t.set_up_s, 1),
        "not_launched": t.unlaunched,
        "states": dict(t.states),
        "lines_expected_per_run": t.expected_lines,
        "lost": t.lost,
        "reconcile_pass_s": {
            "n": len(passes),
            "p50": round(pct(passes, 50), 2),
            "max": round(max(passes, default=float("nan")), 2),
            "interval": args.reconcile_interval,
            "over_interval": over,
        },
        "runpod": t.runpod,
        "report_lag_ms": {"p50": ms(pct(t.lag, 50)), "p99": ms(pct(t.lag, 99)), "n": len(t.lag)},
        "projector_lag_events": {
            "p50": pct([float(x) for x in t.projector_lag], 50),
            "max": max(t.projector_lag, default=0),
        },
        "api_ms": {
            k: {"p50": ms(pct(v, 50)), "p99": ms(pct(v, 99)), "n": len(v)} for k, v in t.api.items()
        },
        "api_errors": t.api_errors,
        "appends_per_s": round(t.appends_per_s, 1),
        "report_store_lines_per_s": round(t.lines_per_s, 1),
        "db_connections_max": t.connections_max,
        "cpu_s": {k: round(v, 1) for k, v in t.cpu.items()},
        "control_plane_cores": round(control_cpu / t.window_s, 2) if t.window_s else None,
        "control_plane_cpu_ms_per_live_run_s": round(per_run_ms, 2),
        "sandbox_cpu_ms_per_live_run_s": round(t.cpu.get("sandbox", 0) * 1000 / live_s, 2),
        "rss_mib": {k: round(v) for k, v in t.rss.items()},
        "control_plane_rss_mib_per_live_run": round(
            sum(v for k, v in t.rss.items() if k != "sandbox") / max(t.runs, 1), 2
        ),
        "run_page_p99_ms": ms(pct(run_pages, 99)),
        "notes": t.notes,
    }
    verdicts = {
        "every run succeeded": t.states.get("succeeded", 0) == t.runs,
        "no report lost": t.lost == 0,
        "reconcile within interval": bool(passes) and over == 0,
        "no key over quota": t.runpod.get("max_per_minute", 0) <= SPEC_QUOTA["minute"]
        and t.runpod.get("refused", 0) == 0,
        "report lag p99 < 10 s": pct(t.lag, 99) < 10,
        "run page p99 < 500 ms": pct(run_pages, 99) < 0.5,
    }
    out["verdicts"] = verdicts
    return out


def print_report(out: dict[str, Any]) -> None:
    print(json.dumps(out, indent=2, default=str))
    print(
        "\nverdicts: "
        + ", ".join(f"{k}: {'PASS' if v else 'FAIL'}" for k, v in out["verdicts"].items())
    )


def main() -> None:
    if "--sandbox-child" in sys.argv:
        i = sys.argv.index("--sandbox-child")
        step_s, steps, chatter = sys.argv[i + 1 : i + 4]
        sandbox_child(float(step_s), int(steps), int(chatter))
        return
    import logging

    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--orgs", type=int, default=10)
    p.add_argument("--runs", type=int, default=10, help="runs in all, spread over the orgs")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--apis", type=int, default=1)
    p.add_argument("--steps", type=int, default=24, help="trainer steps per run")
    p.add_argument("--step-seconds", type=float, default=5.0, help="the trainer's progress_s")
    p.add_argument("--chatter", type=int, default=0, help="plain lines per step (a progress bar)")
    p.add_argument("--users", type=int, default=20, help="virtual users reading run pages")
    p.add_argument("--think-seconds", type=float, default=2.0)
    p.add_argument(
        "--probes", type=int, default=20, help="lag probes, each following runs launch to end"
    )
    p.add_argument("--probe-seconds", type=float, default=0.5)
    p.add_argument("--reconcile-interval", type=float, default=30.0)
    p.add_argument("--db-pool", type=int, default=2, help="TENSORANT_DB_POOL_SIZE")
    p.add_argument("--reconcile-threads", type=int, default=8, help="TENSORANT_RECONCILE_THREADS")
    p.add_argument(
        "--reconcile-shards",
        type=int,
        default=0,
        help="TENSORANT_RECONCILE_SHARDS (default: one per worker)",
    )
    p.add_argument(
        "--idle-every",
        type=int,
        default=10,
        help="TENSORANT_RECONCILE_IDLE_EVERY: passes per comparison of a quiet organization",
    )
    p.add_argument("--callbacks", action="store_true", help="let trainers' callbacks through")
    p.add_argument("--seed-threads", type=int, default=8)
    p.add_argument("--timeout", type=float, default=1800.0, help="for the runs to end")
    p.add_argument("--keep", action="store_true", help="keep the schema and queue")
    p.add_argument("--quick", action="store_true", help="3 orgs, 3 runs of 6 short steps")
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument(
        "--database-url",
        default=os.environ.get("TENSORANT_BENCH_DATABASE_URL", "")
        or "postgresql://postgres@127.0.0.1:5432/test",
    )
    args = p.parse_args()
    if args.quick:
        args.orgs, args.runs, args.steps, args.step_seconds = 3, 3, 6, 2.0
        args.users, args.probes, args.reconcile_interval = 4, 3, 10.0
    tier = run_tier(args)
    out = report(tier, args)
    print_report(out)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2, default=str))


if __name__ == "__main__":
    main()
