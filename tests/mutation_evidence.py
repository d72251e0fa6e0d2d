"""Each mutation the issue names, made in a scratch copy, fails a test.

`uv run python tests/mutation_evidence.py` copies the tree (git's files) to a temporary folder
once per mutation, applies that one change, runs the named tests there with this project's
virtual environment (the copy first on the import path), and prints which tests failed. A
mutation that no test catches is reported and the script exits 1. `--only NAME` runs one.
(Not collected by pytest: it runs the suite, it is not part of it.)
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]


MUTATIONS = (
    Mutation(
        "run logs without the organization check",
        "api/routes/logs.py",
        "    run_doc(views, caller.org_id, run_id)\n    page = store.read(run_id, after, limit)",
        "    page = store.read(run_id, after, limit)",
        ("tests/e2e/test_authorization_matrix.py",),
    ),
    Mutation(
        "no sha256 comparison of the adapter",
        "domain/lora.py",
        "if sha256 is not None and digest != sha256.lower():",
        "if False:",
        (
            "tests/unit/domain/test_lora.py::test_a_valid_zip_with_a_wrong_sha256_is_rejected",
            "tests/e2e/test_safety_promises.py::"
            "test_r7_a_valid_adapter_reported_with_a_wrong_sha256_or_size_is_refused_and_the_pod_kept",
        ),
    ),
    Mutation(
        "no Pod-name lookup before create",
        "adapters/runpod/compute.py",
        "        existing = _oldest(spec.name, _named(self.list_pods(api_key), spec.name, run_id))",
        "        existing = None",
        ("tests/chaos/test_launch_crash.py", "tests/integration/adapters/test_compute_contract.py"),
    ),
    Mutation(
        "the runtime limit terminates instead of stopping",
        "application/reactor.py",
        "            self.compute.stop_pod(key, pod_id)",
        "            self.compute.terminate_pod(key, pod_id)",
        ("tests/e2e/test_runs.py::test_r8_the_runtime_limit_stops_and_retains_the_pod",),
    ),
    Mutation(
        "a billed cost off by a factor",
        "projections/reports/costs.py",
        '        "total": str(cents(total)),',
        '        "total": str(cents(total * 2)),',
        ("tests/e2e/test_money.py",),
    ),
    Mutation(
        "an orphan's cost multiplied by 60",
        "projections/reports/cleanup.py",
        "    return (price + storage) * hours, storage, price",
        "    return (price + storage) * hours * 60, storage, price",
        (
            "tests/e2e/test_money.py::"
            "test_k1_an_orphans_cost_is_its_price_and_disks_since_runpod_started_it",
        ),
    ),
    Mutation(
        "the balance warning never issued",
        "projections/reports/cleanup.py",
        "    if balance is None or burn_per_hour <= 0:\n        return None",
        "    if True:\n        return None",
        (
            "tests/e2e/test_safety_promises.py::"
            "test_k1_the_balance_warning_compares_the_balance_with_days_of_pods_and_storage",
        ),
    ),
    Mutation(
        "views behind never answered 503",
        "api/deps.py",
        "        if not backend.wait_for(position):",
        "        if backend.wait_for(position) and False:",
        (
            "tests/e2e/test_safety_promises.py::"
            "test_a_command_whose_views_do_not_catch_up_answers_503_views_behind_and_is_kept",
        ),
    ),
    Mutation(
        "no reconcile after an error",
        "application/reconciler.py",
        "        now = time.monotonic()\n        with self._after_error_guard:\n"
        "            if now - self._after_error.get(org_id, -1e9) < AFTER_ERROR_GAP_S:",
        "        now = time.monotonic()\n        with self._after_error_guard:\n"
        "            if True:",
        (
            "tests/e2e/test_safety_promises.py::"
            "test_k2_a_runpod_error_while_driving_a_run_reconciles_the_organization_at_once",
            "tests/unit/application/test_reconciler.py::"
            "test_k2_a_provider_error_while_driving_compares_the_organization_at_once",
        ),
    ),
    Mutation(
        "availability-changed not checked where the volume is",
        "domain/launch.py",
        "        or (volume_datacenter is not None and volume_datacenter not in datacenters)\n",
        "",
        (
            "tests/e2e/test_runs.py::test_r4_launch_needs_confirmation_and_rechecks_price_"
            "availability_and_balance",
            "tests/unit/domain/test_rules.py::"
            "test_r4_a_gpu_no_longer_offered_where_the_volume_is_is_an_availability_change",
        ),
    ),
)


def scratch_copy() -> Path:
    """The tracked and new files of the tree (no .venv, no caches) in a temporary folder."""
    target = Path(tempfile.mkdtemp(prefix="tensorant-mutation-"))
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],  # noqa: S607 - git from PATH
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    for name in files:
        src = ROOT / name
        if src.is_file():
            dst = target / name
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    return target


def run(m: Mutation) -> tuple[bool, list[str], float]:
    """(caught, the failed tests, seconds)."""
    copy = scratch_copy()
    try:
        source = (copy / m.path).read_text()
        if source.count(m.old) != 1:
            raise SystemExit(f"{m.name}: the code to mutate is not in {m.path} exactly once")
        (copy / m.path).write_text(source.replace(m.old, m.new))
        env = {**os.environ, "PYTHONPATH": str(copy), "CI": "true"}
        started = time.monotonic()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-n", "0", "-q", "-x", *m.tests],
            cwd=copy,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        seconds = time.monotonic() - started
        failed = re.findall(r"^(?:FAILED|ERROR) (tests/\S+?)(?: - .*)?$", done.stdout, re.M)
        return done.returncode != 0 and bool(failed), failed, seconds
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", help="run the mutation whose name contains this")
    args = parser.parse_args()
    missed = 0
    for m in MUTATIONS:
        if args.only and args.only not in m.name:
            continue
        caught, failed, seconds = run(m)
        missed += not caught
        verdict = "caught by " + ", ".join(failed) if caught else "NOT CAUGHT"
        print(f"- {m.name} ({m.path}): {verdict} [{seconds:.0f} s]", flush=True)
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
