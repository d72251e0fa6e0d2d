"""Benchmark: command throughput (drafts, launches, trainer reports) against raw appends.

    uv run python bench/command_throughput.py                      # SQLite and PostgreSQL
    uv run python bench/command_throughput.py --runs 600 --backend sqlite --repeat 5
    uv run python bench/command_throughput.py --database-url postgresql://postgres@127.0.0.1:5432/test

The application services are built by `entrypoints.bootstrap.build_for_sandbox` (the composition
root a deployment uses, RunPod replaced by the in-process sandbox), for the embedded SQLite store
and for PostgreSQL (a private schema, dropped at the end). One organization is connected to the
sandbox with a network volume, a project and a dataset version. Then, one command at a time:

  drafts:   `services.runs.draft` (validates the config, asks the sandbox for GPU offers, saves);
  launches: `services.runs.launch` of each draft (GPU offers + balance from the sandbox, saves);
  reports:  `services.trainer.progress(run, token, "training", **body)` on each run once its
            Pod runs, the body a trainer sends (boot, seq, time, step, loss...): token check,
            the kept run, and TrainingStarted (with the report's key and progress) saved at
            the run's version, which is the report's claim (the report store is not written:
            `TrainerCallbacks._progress`). A run's later reports are claims in the report
            store and record no event, so they have no raw append to compare with.

The baseline, in the same run and on the same kind of store: the very events each command
recorded (read back from the log as stored events), appended again by the eventsourcing
recorder into a fresh store, one command's events per insert, right after that command (so
both see the same moment of a shared machine's disk and CPU load). Ratio = ours/s ÷ raw/s
(wall clock). `cpu ms`/`raw cpu`: this process's CPU time per call (all threads, so a launch's
includes the in-process sandbox answering it).
Target: ≥ 0.5 for drafts and trainer reports, judged on the median of
`--repeat` rounds (each a fresh store, organization and sandbox). Launches are reported
(they make two HTTP calls to the sandbox each, so their ratio measures the RunPod round trips).
The machine is usually shared: run more than once; absolute figures move with the load.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.application import Application
from eventsourcing.persistence import StoredEvent
from psycopg.sql import SQL, Identifier

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from application import trainer_callbacks
from application.storage import BindVolume
from domain.run_config import RunConfig
from entrypoints.bootstrap import Container, build_for_sandbox, eventsourcing_env
from entrypoints.server import settle_gc
from entrypoints.settings import Settings
from runpod_sandbox import Sandbox

TARGET = 0.5
PROFILE: dict[str, Any] = {}  # --profile: command name -> cProfile.Profile of its calls
PROFILE_SORT = "tottime" if "--tottime" in sys.argv else "cumulative"
# The bench plays the trainer (it sends the reports), so its Pods run no simulated trainer: the
# sandbox's trainer threads would share this process with the commands being timed, which a
# deployment's trainers (on RunPod's machines) never do.
NO_TRAINER_IMAGE = "bench/no-trainer:1.0"
GPU = "NVIDIA A100 80GB PCIe"
CHATS = b"".join(
    b'{"messages": [{"role": "user", "content": "Where is my order %d?"}, '
    b'{"role": "assistant", "content": "It ships tomorrow."}]}\n' % i
    for i in range(3)
)


def config(project: str, dv: str) -> RunConfig:
    return RunConfig(
        project_id=project,
        dataset_version_id=dv,
        kind="trial",
        base_model="Qwen/Qwen2.5-0.5B-Instruct",
        gpu_type_id=GPU,
        gpu_count=1,
        price_limit_per_hour=Decimal("3.00"),
        max_runtime_minutes=60,
    )


def report(i: int) -> dict[str, Any]:
    """A progress report's body as the API hands it on (`TrainerProgress` less its phase): what
    the trainer sends, keyed by its boot and sequence number (`trainer.protocol`)."""
    return {
        "boot": f"{i:016x}",
        "seq": 1,
        "time": "2026-12-01T10:00:00.000Z",
        "step": 1,
        "total_steps": 120,
        "loss": 2.3125,
        "learning_rate": 0.0002,
        "tokens_per_s": 1843.5,
    }


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


class Phase:
    """Latencies of one command kind and the stored events each call recorded."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.latencies: list[float] = []
        self.batches: list[list[StoredEvent]] = []
        self.wall = 0.0
        self.cpu = 0.0  # process CPU seconds spent in the calls (all threads: the sandbox too)

    def rate(self) -> float:
        return len(self.latencies) / self.wall if self.wall else 0.0


def max_id(c: Container) -> int:
    return int(c.services.log.recorder.max_notification_id() or 0)


def events_between(c: Container, after: int, upto: int) -> list[StoredEvent]:
    if upto <= after:
        return []
    found = c.services.log.recorder.select_notifications(after + 1, upto - after, stop=upto)
    return [
        StoredEvent(n.originator_id, n.originator_version, n.topic, n.state)
        for n in found
        if n.id <= upto
    ]


class Raw(Application[UUID]):
    """The baseline: the eventsourcing recorder of a fresh store of the same kind."""

    name = "raw"


def timed_calls(
    c: Container, raw: Raw, name: str, calls: Sequence[Callable[[], Any]]
) -> tuple[Phase, Phase]:
    """Each call, then the very events it recorded appended again by the raw recorder right
    after it, so a command and its baseline see the same moment of a shared machine's load."""
    phase, baseline = Phase(name), Phase(f"raw {name}")
    profile = PROFILE.setdefault(name, cProfile.Profile()) if PROFILE.get("on") else None
    for call in calls:
        before = max_id(c)
        cpu, t = time.process_time(), time.perf_counter()
        if profile is not None:
            profile.runcall(call)
        else:
            call()
        phase.latencies.append(time.perf_counter() - t)
        phase.cpu += time.process_time() - cpu
        batch = events_between(c, before, max_id(c))
        phase.batches.append(batch)
        cpu, t = time.process_time(), time.perf_counter()
        raw.recorder.insert_events(batch)
        baseline.latencies.append(time.perf_counter() - t)
        baseline.cpu += time.process_time() - cpu
    # the id look-ups around each call are the bench's, not the command's: count only the calls
    phase.wall = sum(phase.latencies)
    baseline.wall = sum(baseline.latencies)
    return phase, baseline


def measure(backend: str, args: argparse.Namespace) -> list[tuple[Phase, Phase]]:
    sandbox = Sandbox(startup_seconds=0).start()
    sandbox.model.add_credit(1_000_000)
    # RunPod's spend limit (seed: $80/hr) would stop the 49th A100 Pod: every run should train
    sandbox.model.spend_limit = Decimal(1_000_000)
    tmp = Path(tempfile.mkdtemp(prefix="bench_cmd_"))
    schema = f"bench_cmd_{uuid.uuid4().hex[:8]}"
    raw_schema = f"{schema}_raw"
    if backend == "postgres":
        with psycopg.connect(args.database_url, autocommit=True) as conn:
            for name in (schema, raw_schema):
                conn.execute(SQL("CREATE SCHEMA {}").format(Identifier(name)))
        settings = Settings(
            data_dir=tmp,
            database_url=f"{args.database_url}?schema={schema}",
            trainer_image=NO_TRAINER_IMAGE,
        )
        raw_settings = Settings(
            data_dir=tmp, database_url=f"{args.database_url}?schema={raw_schema}"
        )
    else:
        settings = Settings(data_dir=tmp, trainer_image=NO_TRAINER_IMAGE)
        raw_settings = Settings(data_dir=tmp / "raw")
        (tmp / "raw").mkdir()
    c = build_for_sandbox(settings, sandbox)
    raw = Raw(env={**eventsourcing_env(raw_settings), "CREATE_TABLE": "y"})
    try:
        s = c.services
        creds: dict[str, Any] = sandbox.credentials()
        vol = next(v for v in creds["volumes"] if v["dataCenterId"] == "EU-RO-1")
        org = s.organizations.create("Bench")
        s.organizations.add_member(org, "owner@bench.test", "owner")
        s.connections.connect(org, "user:owner", creds["api_key"])
        s.storage.bind_volume(
            org,
            "user:owner",
            BindVolume(
                vol["id"], "EU-RO-1", creds["s3_access_key_id"], creds["s3_secret_access_key"]
            ),
        )
        project, _ = s.projects.create(org, "user:owner", "bench bot")
        dv, _ = s.projects.upload_dataset(  # onto the volume: a launch reads it back
            org, project, "user:owner", name="chats", version="1", source=io.BytesIO(CHATS)
        )
        cfg = config(project, dv)
        run_ids: list[str] = []
        # Drafts, launches and trainer reports are API commands: a deployment runs them in
        # `tensorant serve`, which tunes the collector once started (`settle_gc`); so does this
        # process (the raw baseline shares it) once its set-up is done.
        settle_gc()

        def draft() -> None:
            run_ids.append(s.runs.draft(org, "user:member", cfg)[0])

        drafts = timed_calls(c, raw, "drafts", [draft] * args.runs)
        launches = timed_calls(
            c,
            raw,
            "launches",
            [partial(s.runs.launch, org, r, "user:member", True, "3.00") for r in run_ids],
        )
        for r in run_ids:  # not timed: the worker's part, until each Pod runs
            for _ in range(4):
                s.reactor.drive_run(r)
        running = [r for r in run_ids if s.log.run(org, r).state == "running"]
        if len(running) < len(run_ids):
            print(f"{backend}: only {len(running)}/{len(run_ids)} runs reached running")
        calls = [
            partial(s.trainer.progress, r, s.trainer.token(r), "training", **report(i))
            for i, r in enumerate(running)
        ]
        # A run's first report: the server has not yet computed its token (a repeat would find
        # it kept; minting it above for the calls must not make the timed check cheaper).
        trainer_callbacks._token.cache_clear()
        reports = timed_calls(
            c,
            raw,
            "trainer reports",
            calls,
        )
        return [drafts, launches, reports]
    finally:
        raw.close()
        c.close()
        sandbox.stop()
        shutil.rmtree(tmp, ignore_errors=True)  # a round's data dir (SQLite files, vault, key)
        if backend == "postgres":
            with psycopg.connect(args.database_url, autocommit=True) as conn:
                for name in (schema, raw_schema):
                    conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(name)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200, help="drafts = launches = reports")
    parser.add_argument("--backend", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; the median is judged")
    parser.add_argument(
        "--profile", action="store_true", help="print each command's cProfile (slows it down)"
    )
    parser.add_argument("--tottime", action="store_true", help="--profile sorted by own time")
    args = parser.parse_args()
    PROFILE["on"] = args.profile
    backends = ["sqlite", "postgres"] if args.backend == "both" else [args.backend]
    print(
        f"{'round':<6}{'backend':<9}{'command':<17}{'n':>5}{'ev/cmd':>7}{'ours/s':>9}{'p50 ms':>8}"
        f"{'p99 ms':>8}{'raw/s':>9}{'raw p50':>8}{'raw p99':>8}{'ratio':>7}"
        f"{'cpu ms':>8}{'raw cpu':>8}"
    )
    ratios: dict[tuple[str, str], list[float]] = {}
    for round_ in range(1, args.repeat + 1):
        for backend in backends:
            for ours, raw in measure(backend, args):
                n = len(ours.latencies)
                if n == 0:
                    print(f"{round_:<6}{backend:<9}{ours.name:<17}    0  (nothing measured)")
                    continue
                events = statistics.fmean(len(b) for b in ours.batches)
                ratio = ours.rate() / raw.rate() if raw.rate() else 0.0
                ratios.setdefault((backend, ours.name), []).append(ratio)
                print(
                    f"{round_:<6}{backend:<9}{ours.name:<17}{n:>5}{events:>7.1f}"
                    f"{ours.rate():>9.0f}{pct(ours.latencies, 50) * 1000:>8.1f}"
                    f"{pct(ours.latencies, 99) * 1000:>8.1f}{raw.rate():>9.0f}"
                    f"{pct(raw.latencies, 50) * 1000:>8.1f}{pct(raw.latencies, 99) * 1000:>8.1f}"
                    f"{ratio:>7.2f}{ours.cpu / n * 1000:>8.2f}{raw.cpu / n * 1000:>8.2f}"
                )
    print(f"ratios ours/raw, median of {args.repeat} round(s), {args.runs} runs:")
    for (backend, name), values in ratios.items():
        ratio = statistics.median(values)
        target = name != "launches"
        verdict = ("PASS" if ratio >= TARGET else "MISS") if target else "(no target)"
        rounds = " ".join(f"{v:.2f}" for v in values)
        print(f"{backend:<9}{name:<17} median {ratio:5.2f}  {verdict}  (rounds: {rounds})")
    for name, profile in PROFILE.items():
        if name != "on":
            print(f"\n=== profile: {name} ===")
            pstats.Stats(profile).sort_stats(PROFILE_SORT).print_stats(45)


if __name__ == "__main__":
    main()
