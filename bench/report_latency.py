"""Benchmark: report latency through Pod-log following vs callbacks, and one worker following
many runs' Pod logs.

    uv run python bench/report_latency.py                         # both parts, SQLite
    uv run python bench/report_latency.py --lines 40 --runs 20 --seconds 5     # a quick run
    uv run python bench/report_latency.py --part scale --backend postgres

Part 1, latency ("the trainer prints -> the run view shows it"), measured from outside:
`entrypoints.server.serve_with_sandbox` serves the API (uvicorn thread, embedded worker, REST v2
wire so the worker follows Pod logs) over the in-process RunPod sandbox. One run is drafted and
launched over HTTP with the sandbox's `hang` scenario (the simulated trainer reports five steps,
then only prints a plain line every 0.25 s), so it stays `running` and a Pod-log follower
follows it. The bench then plays the trainer, one line at a time, alternating paths:
  pod logs:  a `TENSORANT-REPORT` Log line appended to the Pod's log in the sandbox (what
             RunPod serves on `GET /v2/pods/{id}/logs`, SSE) -> the worker's follower stores it;
  callback:  the same kind of line POSTed to `/v1/trainer/runs/{id}/logs` with the run's token
             (read from the Pod's env, as the trainer would) -> stored by the API.
Each path has its own texts. Latency = emit -> the first `GET /v1/runs/{id}/logs?after=...`
(as a member) whose answer holds the line; the bench polls every `--poll-ms`. Baseline = the
callback path; ratio = pod logs / callback, p50 and p99. The sandbox's SSE handler looks for
new lines every 50 ms, so the Pod-log path carries ~25 ms of the stand-in's own delay on
average (RunPod's real delivery delay is unknown); the callback path includes the HTTP POST.

Part 2, scale: one worker's `PodLogFollowers` following `--runs` concurrent runs. The RunPod
sandbox runs as a child process (this file with `--sandbox-child`), standing in for RunPod on
another machine; it also plays the trainers, appending `--rate` Log report lines per second to
every Pod's log (the emit time is in the line). The worker is this process: services built by
`entrypoints.bootstrap.build` over the sandbox (REST v2 wire, `pod_log_followers = runs`), runs
drafted, launched and driven to `running` through the services, Pods that run no trainer (image
`bench/no-trainer`), then `followers.scan()` once. Nothing else runs in this process meanwhile
(no API, no projector, no reactor), so its CPU time over the window is the followers'. Lag = the
line's emit -> `append_reports` of the report store returned (a wrapper on the store instance).
Baseline, same run, same Pods: one thread per Pod reading the same SSE streams with plain httpx
and parsing each report line, storing nothing. Ratios = followers / bare readers. The followers
first read each Pod's backlog (the baseline window's lines); the window starts after that.
While the followers stream, one more RunPod call of the same worker (its HTTP client) is timed.
Set-up only: the child's REST quota and spend limit are raised so 100 A100 Pods can be launched
in seconds (the sandbox's seeded $80/h spend limit stops at ~48 of them).

Absolute figures move with the machine's load; read the ratios. Everything of part 1 shares one
process (and the GIL): API, worker, sandbox and the polling user.
"""

from __future__ import annotations

import argparse
import io
import json
import logging
import math
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import psycopg
from psycopg.sql import SQL, Identifier

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from application.ports import ReportLine
from application.storage import BindVolume
from domain.run_config import RunConfig
from entrypoints.bootstrap import Container, SystemClock, build, sandbox_settings
from entrypoints.server import serve_with_sandbox
from entrypoints.settings import Settings
from runpod_sandbox import Sandbox
from trainer.protocol import ENV_RUN_TOKEN, Log, format_report_line, parse_report_line
from trainer.protocol.reports import new_boot_id, utc_now

GPU = "NVIDIA A100 80GB PCIe"
PRICE = "3.00"
MARK = "bench-line "  # what the bench emits: "bench-line <path> <n> <emit time>"
CHATS = b"".join(
    b'{"messages": [{"role": "user", "content": "Where is my order %d?"}, '
    b'{"role": "assistant", "content": "It ships tomorrow."}]}\n' % i
    for i in range(3)
)
PROTOCOL = "BENCH-CHILD "  # the sandbox child's answers on its stdout start with it
NO_TRAINER_IMAGE = "bench/no-trainer:1.0"  # a Pod the sandbox runs no simulated trainer in


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def ms(seconds: float) -> str:
    return "-" if math.isnan(seconds) else f"{seconds * 1000:.1f}"  # NaN: nothing measured


# ---------------------------------------------------------------- shared set-up


@contextmanager
def store_settings(args: argparse.Namespace, prefix: str, **fields: Any) -> Iterator[Settings]:
    """Settings on a fresh SQLite data directory, or a private PostgreSQL schema (dropped)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"{prefix}_"))
    if args.backend != "postgres":
        yield Settings(data_dir=tmp, **fields)
        return
    schema = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.database_url, autocommit=True) as conn:
        conn.execute(SQL("CREATE SCHEMA {}").format(Identifier(schema)))
    try:
        yield Settings(data_dir=tmp, database_url=f"{args.database_url}?schema={schema}", **fields)
    finally:
        with psycopg.connect(args.database_url, autocommit=True) as conn:
            conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(schema)))


@dataclass
class Seeded:
    org: str
    member_token: str
    config: RunConfig


def seed(c: Container, creds: dict[str, Any]) -> Seeded:
    """An organization connected to the sandbox with a network volume, a project and a dataset
    version (through the services: not what is measured)."""
    s = c.services
    org = s.organizations.create(f"Bench {uuid.uuid4().hex[:6]}")
    s.organizations.add_member(org, "owner@bench.test", "owner")
    member = s.organizations.add_member(org, "member@bench.test", "member").token
    s.connections.connect(org, "user:owner", creds["api_key"])
    vol = next(v for v in creds["volumes"] if v["dataCenterId"] == "EU-RO-1")
    s.storage.bind_volume(
        org,
        "user:owner",
        BindVolume(vol["id"], "EU-RO-1", creds["s3_access_key_id"], creds["s3_secret_access_key"]),
    )
    project, _ = s.projects.create(org, "user:owner", "bench bot")
    dv, _ = s.projects.upload_dataset(  # onto the volume, through the sandbox's S3
        org, project, "user:owner", name="chats", version="1", source=io.BytesIO(CHATS)
    )
    config = RunConfig(
        project_id=project,
        dataset_version_id=dv,
        kind="trial",
        base_model="Qwen/Qwen2.5-0.5B-Instruct",
        gpu_type_id=GPU,
        gpu_count=1,
        price_limit_per_hour=Decimal(PRICE),
        max_runtime_minutes=60,
    )
    return Seeded(org, member, config)


def until(check: Callable[[], Any], timeout: float, what: str, pause: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(pause)


# ---------------------------------------------------------------- part 1: latency


@dataclass
class Latency:
    pod_logs: list[float] = field(default_factory=list)
    callback: list[float] = field(default_factory=list)
    view_get: list[float] = field(default_factory=list)  # one GET /logs, the observation floor
    missed: dict[str, int] = field(default_factory=lambda: {"pod_logs": 0, "callback": 0})


class RunView:
    """The run's log lines as a member sees them over HTTP, polled from a cursor."""

    def __init__(self, http: httpx.Client, run_id: str, poll_s: float, out: Latency) -> None:
        self.http, self.run_id, self.poll_s, self.out = http, run_id, poll_s, out
        self.after = 0

    def page(self) -> list[str]:
        t = time.perf_counter()
        r = self.http.get(
            f"/v1/runs/{self.run_id}/logs", params={"after": self.after, "limit": 1000}
        )
        self.out.view_get.append(time.perf_counter() - t)
        r.raise_for_status()
        body = r.json()
        self.after = int(body["next_after"])
        return [str(x["text"]) for x in body["lines"]]

    def wait_for(self, text: str, timeout: float) -> float | None:
        """perf_counter when the line was first seen, None after `timeout`."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if text in self.page():
                return time.perf_counter()
            time.sleep(self.poll_s)
        return None


def launch_hung_run(user: httpx.Client, box: Sandbox, seeded: Seeded) -> tuple[str, str]:
    """Draft and launch a run over HTTP with the `hang` scenario; (run id, Pod id) once the run
    is running."""
    box.set_scenario("hang", 1)
    body = {k: v for k, v in seeded.config.as_dict().items() if v is not None}
    body["price_limit_per_hour"] = PRICE
    r = user.post("/v1/runs", json=body)
    assert r.status_code == 201, r.text
    run_id = str(r.json()["id"])
    launch = {"confirm": True, "accepted_price_per_hour": PRICE}
    r = user.post(f"/v1/runs/{run_id}/launch", json=launch)
    assert r.status_code == 202, r.text

    def running() -> dict[str, Any] | None:
        doc: dict[str, Any] = user.get(f"/v1/runs/{run_id}").json()
        return doc if doc["state"] == "running" and doc["pod_id"] else None

    return run_id, str(until(running, 60, "the run to be running")["pod_id"])


def sample(
    args: argparse.Namespace,
    out: Latency,
    view: RunView,
    emit: dict[str, Callable[[str], None]],
) -> None:
    """One line at a time, the paths alternating: emit, then poll the run view until it shows."""
    for n in range(args.lines):
        for path, send in emit.items():
            text = f"{MARK}{path} {n} {time.time():.6f}"
            t0 = time.perf_counter()
            send(text)
            seen = view.wait_for(text, args.timeout)
            if seen is None:
                out.missed[path] += 1
            else:
                (out.pod_logs if path == "pod_logs" else out.callback).append(seen - t0)
            time.sleep(random.uniform(0, 0.02))  # no lock-step with any poll loop


def latency(args: argparse.Namespace) -> Latency:
    out = Latency()
    boot, seq = new_boot_id(), iter(range(1, 10**9))
    with (
        store_settings(args, "bench_lat", log_level="WARNING") as settings,
        Sandbox(startup_seconds=0.1) as box,
    ):
        box.model.add_credit(1_000_000)
        server, c = serve_with_sandbox(
            settings, box, runpod_api="rest", reconcile_interval=1.0, projection_poll_interval=0.2
        )
        user = httpx.Client(base_url=server.base_url, timeout=30)
        trainer = httpx.Client(base_url=server.base_url, timeout=30)
        try:
            seeded = seed(c, box.credentials())
            c.catch_up()
            user.headers["Authorization"] = f"Bearer {seeded.member_token}"
            run_id, pod_id = launch_hung_run(user, box, seeded)
            token = box.model.pods[pod_id].env[ENV_RUN_TOKEN]  # what the container is given
            trainer.headers["Authorization"] = f"Bearer {token}"
            view = RunView(user, run_id, args.poll_ms / 1000, out)
            # The follower streams (the hang loop's plain lines reach the run only through it)
            # and the simulated trainer's own reports are over.
            until(
                lambda: any("NCCL barrier" in x for x in view.page()),
                60,
                "the Pod's plain lines in the run view (the follower following)",
            )
            out.view_get.clear()

            def print_line(text: str) -> None:  # the trainer's stdout = the Pod's log
                report = Log(boot=boot, seq=next(seq), time=utc_now(), text=text)
                box.model.append_log(pod_id, "container", format_report_line(report))

            def post_line(text: str) -> None:
                line = {"boot": boot, "seq": next(seq), "time": utc_now(), "text": text}
                r = trainer.post(f"/v1/trainer/runs/{run_id}/logs", json={"lines": [line]})
                assert r.status_code == 202, r.text

            sample(args, out, view, {"pod_logs": print_line, "callback": post_line})
            user.post(f"/v1/runs/{run_id}/cancel")
        finally:
            trainer.close()
            user.close()
            server.stop()
    return out


def print_latency(res: Latency, args: argparse.Namespace) -> None:
    print(f"\nReport latency, one running run ({args.backend}; emit -> GET /v1/runs/{{id}}/logs)")
    print(f"{'path':<28}{'n':>6}{'missed':>8}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}")
    rows = (
        ("pod logs (follower, SSE)", res.pod_logs, res.missed["pod_logs"]),
        ("callback (POST, baseline)", res.callback, res.missed["callback"]),
        ("one GET /logs (view floor)", res.view_get, 0),
    )
    for name, values, missed in rows:
        print(
            f"{name:<28}{len(values):>6}{missed:>8}{ms(pct(values, 50)):>9}{ms(pct(values, 90)):>9}"
            f"{ms(pct(values, 99)):>9}{ms(max(values) if values else float('nan')):>9}"
        )
    p50 = pct(res.pod_logs, 50) / pct(res.callback, 50)
    p99 = pct(res.pod_logs, 99) / pct(res.callback, 99)
    print(f"ratio pod logs / callback: p50 {p50:.2f}x, p99 {p99:.2f}x")


# ---------------------------------------------------------------- part 2: scale


def sandbox_child() -> None:
    """The RunPod sandbox in its own process; feeds every Pod without a trainer on command.

    stdout: one JSON line at start (`base_url`, `credentials`), one per `feed` done.
    stdin: `feed <lines per s per Pod> <seconds>` or `quit`."""
    box = Sandbox(startup_seconds=0).start()
    box.model.add_credit(1_000_000)
    # The seeded account's spend limit ($80/h) stops at ~48 A100 Pods.
    box.model.spend_limit = Decimal(1_000_000)
    # Set-up drafts and launches hundreds of runs a minute; RunPod's real quota would pace
    # them (the measured windows make one request per Pod: the stream).
    box.set_faults(
        rate_limit_per_minute=10_000_000, rate_limit_per_hour=10_000_000, rate_limit_per_day=10**9
    )
    hello = {"base_url": box.base_url, "credentials": box.credentials()}
    print(PROTOCOL + json.dumps(hello), flush=True)
    boot = new_boot_id()
    seqs: dict[str, int] = {}
    try:
        for command in sys.stdin:
            words = command.split()
            if not words or words[0] == "quit":
                break
            rate, seconds = float(words[1]), float(words[2])
            with box.model.lock:
                pods = sorted(
                    p.id
                    for p in box.model.pods.values()
                    if not p.is_trainer and p.desired_status == "RUNNING"
                )
            total = round(rate * seconds) * len(pods)
            step = 1 / (rate * len(pods)) if pods else 0.0
            start, k = time.monotonic(), 0
            while k < total:
                due = start + k * step
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                pod = pods[k % len(pods)]
                seqs[pod] = seqs.get(pod, 0) + 1
                text = f"{MARK}scale {k} {time.time():.6f}"
                report = Log(boot=boot, seq=seqs[pod], time=utc_now(), text=text)
                box.model.append_log(pod, "container", format_report_line(report))
                k += 1
            print(PROTOCOL + json.dumps({"fed": total, "pods": len(pods)}), flush=True)
    finally:
        # Streams still open at stop are cancelled after the grace: expected, not worth a trace.
        logging.getLogger("uvicorn.error").setLevel(logging.CRITICAL)
        box.stop()


class RemoteSandbox:
    """What `sandbox_settings` needs of a sandbox in another process."""

    def __init__(self, hello: dict[str, Any]) -> None:
        self.base_url = str(hello["base_url"])
        self._credentials: dict[str, Any] = hello["credentials"]

    def credentials(self) -> dict[str, Any]:
        return self._credentials


def child_cpu(pid: int) -> float:
    """utime + stime of a child process, seconds (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Window:
    name: str
    runs: int
    fed: int = 0
    lags: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    wall_s: float = 0.0
    sandbox_cpu_s: float = 0.0
    note: str = ""

    @property
    def cpu_ms_per_run_s(self) -> float:
        return self.cpu_s * 1000 / self.runs / self.wall_s if self.wall_s else float("nan")


class Child:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(  # noqa: S603 - this very file, by our own interpreter
            [sys.executable, __file__, "--sandbox-child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.hello: dict[str, Any] = self.read()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(PROTOCOL):  # anything else is a library printing to stdout
                body: dict[str, Any] = json.loads(line.removeprefix(PROTOCOL))
                return body
        raise RuntimeError("the sandbox child ended (see its stderr above)")

    def feed(self, rate: float, seconds: float) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"feed {rate} {seconds}\n")
        self.proc.stdin.flush()
        return self.read()

    def cpu(self) -> float:
        return child_cpu(self.proc.pid)

    def stop(self) -> None:
        if self.proc.stdin is not None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            except OSError:
                pass
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def measured(
    w: Window,
    child: Child,
    args: argparse.Namespace,
    received: Callable[[], int],
    share: float = 1.0,
) -> None:
    """Feed every Pod for `--seconds` and wait until every line arrived (or `--timeout`);
    `share`: the fraction of the Pods whose lines are read."""
    cpu0, sb0, t0 = time.process_time(), child.cpu(), time.perf_counter()
    w.fed = round(int(child.feed(args.rate, args.seconds)["fed"]) * share)
    deadline = time.perf_counter() + args.timeout
    while received() < w.fed and time.perf_counter() < deadline:
        time.sleep(0.02)
    w.wall_s = time.perf_counter() - t0
    w.cpu_s = time.process_time() - cpu0
    w.sandbox_cpu_s = child.cpu() - sb0


def bare_window(args: argparse.Namespace, child: Child, pods: list[str]) -> Window:
    """One thread per Pod: httpx streams the Pod's log (SSE), each report line is parsed."""
    w = Window("bare SSE readers (baseline)", len(pods))
    key = str(child.hello["credentials"]["api_key"])
    base = str(child.hello["base_url"])
    client = httpx.Client(
        limits=httpx.Limits(max_connections=len(pods) + 4), timeout=httpx.Timeout(30, read=120)
    )
    stop = threading.Event()
    opened: list[str] = []

    def read(pod_id: str) -> None:
        headers = {"Authorization": f"Bearer {key}", "Accept": "text/event-stream"}
        url = f"{base}/v2/pods/{pod_id}/logs"
        with client.stream("GET", url, headers=headers, params={"tail": 0}) as r:
            opened.append(pod_id)
            for raw in r.iter_lines():
                if stop.is_set():
                    return
                if raw.startswith("data:"):
                    report = parse_report_line(json.loads(raw[5:])["line"])
                    if isinstance(report, Log) and report.text.startswith(MARK):
                        w.lags.append(time.time() - float(report.text.split()[3]))

    threads = [threading.Thread(target=read, args=(p,), daemon=True) for p in pods]
    for t in threads:
        t.start()
    until(lambda: len(opened) == len(pods), 60, "every bare stream to open")
    time.sleep(0.5)  # each stream's generator has taken its starting point
    try:
        measured(w, child, args, lambda: len(w.lags))
    finally:
        stop.set()  # each reader sees it at its next line or keep-alive (about 1 s)
        for t in threads:
            t.join(3)
        client.close()
    return w


def hook_store(store: Any, stored: list[tuple[float, str]]) -> Callable[[], None]:
    """Record (when written, text) of each bench line the report store writes, by a single
    report's path or the followers' batches (R6 at scale); returns the undo."""
    original = store.append_reports
    many = getattr(store, "append_many", None)

    def hooked(run_id: str, lines: Any, via: str) -> int:
        n: int = original(run_id, lines, via)
        now = time.time()
        batch: list[ReportLine] = list(lines)
        stored.extend((now, text) for _b, _s, _at, text in batch if text.startswith(MARK))
        return n

    def hooked_many(batches: Any, *rest: Any) -> dict[str, int]:
        assert many is not None
        n: dict[str, int] = many(batches, *rest)
        now = time.time()
        for batch in batches.values():
            stored.extend((now, text) for _b, _s, _at, text in batch if text.startswith(MARK))
        return n

    store.append_reports = hooked
    if many is not None:
        store.append_many = hooked_many

    def unhook() -> None:
        del store.append_reports
        if many is not None:
            del store.append_many

    return unhook


def follower_window(
    args: argparse.Namespace, c: Container, child: Child, runs: list[str], backlog: int, key: str
) -> Window:
    w = Window("PodLogFollowers (one worker)", len(runs))
    followers = c.services.followers
    assert followers is not None, "no Pod-log followers: is the REST v2 wire configured?"
    stored: list[tuple[float, str]] = []  # (when the store's write returned, text)
    unhook = hook_store(c.logs, stored)
    try:
        try:
            started = followers.scan()
        except Exception as e:  # reported: the runs it had started are measured
            started = followers.following()
            w.note = f"scan failed after {len(started)} followers: {type(e).__name__}: {e}"
        if len(started) < len(runs):
            w.note = w.note or f"scan started {len(started)} followers for {len(runs)} runs"
            w.runs = len(started)
            backlog = backlog * len(started) // len(runs)
        # Each follower first reads its Pod's backlog (the baseline window's lines): wait it out.
        t = time.perf_counter()
        until(lambda: len(stored) >= backlog, args.timeout + 60, "the followers' backlog", 0.1)
        catch_up = time.perf_counter() - t
        w.note = (w.note + "; " if w.note else "") + (
            f"backlog of {backlog} lines read in {catch_up:.1f} s first"
        )
        start = len(stored)
        probe: dict[str, Any] = {}
        wire = c.services.reactor.compute.wire  # type: ignore[attr-defined]

        def probe_call() -> None:
            """One more RunPod call of this worker (its HTTP client) while it follows: the
            REST wire's GET /v2/pods/{id}, no retries."""
            t0 = time.perf_counter()
            try:
                wire.pod(key, "bench-probe-missing")
                probe["result"] = f"answered in {time.perf_counter() - t0:.2f} s"
            except Exception as e:  # reported, not raised: what happens is the finding
                probe["result"] = f"{type(e).__name__} ({e}) after {time.perf_counter() - t0:.1f} s"

        prober = threading.Thread(target=probe_call, daemon=True)
        prober.start()
        measured(w, child, args, lambda: len(stored) - start, len(started) / len(runs))
        prober.join(max(0.0, 35 - w.wall_s))
        w.note += "; another RunPod call of this worker meanwhile: " + probe.get(
            "result", f"no answer after {w.wall_s:.0f} s"
        )
        w.lags = [at - float(text.split()[3]) for at, text in stored[start:]]
    finally:
        unhook()
        followers.stop(timeout=1)
    return w


def scale(args: argparse.Namespace) -> list[Window]:
    child = Child()
    try:
        remote = RemoteSandbox(child.hello)
        with store_settings(
            args,
            "bench_follow",
            runpod_api="rest",
            pod_log_followers=args.runs,
            trainer_image=NO_TRAINER_IMAGE,
            log_level="WARNING",
        ) as settings:
            c = build(sandbox_settings(settings, remote), clock=SystemClock())
            try:
                seeded = seed(c, remote.credentials())
                s, t0 = c.services, time.perf_counter()
                runs: list[str] = []
                for _ in range(args.runs):
                    run_id = s.runs.draft(seeded.org, "user:member", seeded.config)[0]
                    s.runs.launch(seeded.org, run_id, "user:member", True, PRICE)
                    for _ in range(4):
                        s.reactor.drive_run(run_id)
                    run = s.log.run(seeded.org, run_id)
                    if run.state != "running":
                        raise RuntimeError(
                            f"run {run_id} is {run.state} ({run.state_reason}), not running,"
                            f" after {len(runs)} running ones"
                        )
                    runs.append(run_id)
                c.catch_up()  # the run index (a view) lists them
                print(
                    f"set-up: {len(runs)} runs drafted, launched and running in "
                    f"{time.perf_counter() - t0:.1f} s",
                    flush=True,
                )
                pods = [str(s.log.run(seeded.org, r).pod_id) for r in runs]
                bare = bare_window(args, child, pods)
                key = s.connections.runpod_key(seeded.org)
                ours = follower_window(args, c, child, runs, bare.fed, key)
            finally:
                c.close()
    finally:
        child.stop()
    return [bare, ours]


def print_scale(windows: list[Window], args: argparse.Namespace) -> None:
    bare, ours = windows
    print(
        f"\nOne worker following {ours.runs} runs' Pod logs ({args.backend}; "
        f"{args.rate:g} lines/s per run for {args.seconds:g} s)"
    )
    print(
        f"{'reader':<30}{'runs':>5}{'fed':>7}{'lost':>6}{'CPU ms/run/s':>14}{'cores':>7}"
        f"{'lag p50 ms':>11}{'lag p99 ms':>11}{'RunPod-side CPU s':>19}"
    )
    for w in windows:
        print(
            f"{w.name:<30}{w.runs:>5}{w.fed:>7}{w.fed - len(w.lags):>6}"
            f"{w.cpu_ms_per_run_s:>14.2f}{w.cpu_s / w.wall_s:>7.2f}"
            f"{ms(pct(w.lags, 50)):>11}{ms(pct(w.lags, 99)):>11}{w.sandbox_cpu_s:>19.1f}"
        )
        if w.note:
            print(f"  {w.note}")
    cpu = ours.cpu_ms_per_run_s / bare.cpu_ms_per_run_s
    lag = pct(ours.lags, 99) / pct(bare.lags, 99)
    print(f"ratio followers / bare: CPU per run {cpu:.2f}x, lag p99 {lag:.2f}x")


def main() -> None:
    # Before anything imports the runpod SDK, whose rp_upload calls basicConfig(level=INFO).
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if "--sandbox-child" in sys.argv:
        sandbox_child()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=["latency", "scale", "both"], default="both")
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--lines", type=int, default=200, help="latency samples per path")
    parser.add_argument("--poll-ms", type=float, default=5.0, help="pause between view GETs")
    parser.add_argument("--runs", type=int, default=100, help="concurrent runs (scale)")
    parser.add_argument("--rate", type=float, default=2.0, help="lines/s per run (scale)")
    parser.add_argument("--seconds", type=float, default=20.0, help="feed window (scale)")
    parser.add_argument("--timeout", type=float, default=30.0, help="wait for a line at most")
    args = parser.parse_args()
    summary: list[str] = []
    if args.part in ("latency", "both"):
        res = latency(args)
        print_latency(res, args)
        summary.append(
            f"latency p50/p99: pod logs {ms(pct(res.pod_logs, 50))}/{ms(pct(res.pod_logs, 99))} "
            f"ms, callback {ms(pct(res.callback, 50))}/{ms(pct(res.callback, 99))} ms"
        )
    if args.part in ("scale", "both"):
        windows = scale(args)
        print_scale(windows, args)
        ours = windows[1]
        summary.append(
            f"{ours.runs} runs followed by one worker: {ours.cpu_ms_per_run_s:.2f} ms CPU per "
            f"run per s, lag p99 {ms(pct(ours.lags, 99))} ms"
        )
    print("\nSummary: " + "; ".join(summary))


if __name__ == "__main__":
    main()
