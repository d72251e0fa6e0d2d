"""Mutation evidence: each mutation below, made in a scratch copy, must fail a test aimed at it.

`uv run python tests/mutation_evidence.py` copies the tree (git's files) to a temporary folder
once. For each mutation it first runs the chosen tests on the unmutated copy (once per distinct
set of tests): they must pass, or the mutation is reported BASELINE FAILED and counts as no
evidence at all. Then it applies the one change, runs the same tests with this project's virtual
environment (the copy first on the import path, `CI=true` so a missing service fails rather
than skips) and restores the file. Outcomes are read from pytest's JUnit XML, not from its
text, so test ids with spaces (parametrized route ids) are read whole:
- CAUGHT: at least one chosen test failed (an assertion or an exception in the test's body);
- ERROR: only errors (a fixture could not start, a service is down): not a catch;
- SURVIVED: every chosen test passed with the mutation in place.
A mutation may carry `equivalent`, a one-line reason it changes no behaviour; it is still run,
reported apart and left out of the kill rate (killed / (mutations - equivalent)).
`--only TEXT` runs the mutations whose name contains TEXT; `--record FILE` writes what ran (each
mutation, file, tests, outcome, failed ids, seconds) as JSON. Exit 1 unless all are caught.
(Not collected by pytest: it runs tests, it is not one.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

T_TERM = "tests/unit/application/test_termination_confirmation.py"
T_DUP = "tests/unit/application/test_duplicate_delivery.py"
T_RUNS = "tests/unit/application/test_runs.py"
T_RECON = "tests/unit/application/test_reconciler.py"
T_VAULT = "tests/integration/adapters/test_vault.py"
T_CHARGES = "tests/unit/billing/test_charges.py"
T_FOCUS = "tests/unit/billing/test_focus_columns.py"
T_REPORTS = "tests/unit/application/test_reports.py"


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    equivalent: str = ""  # why this change cannot alter behaviour, when it cannot
    args: tuple[str, ...] = field(default=())  # more pytest arguments (-k ...)


SAFETY = (
    # application/pods.py: the one honest way to terminate (K2, K3)
    Mutation(
        "a failed read after terminate counts as confirmed",
        "application/pods.py",
        "        return True, error or e.detail",
        "        return False, error or e.detail",
        (T_TERM,),
    ),
    Mutation(
        "RunPod's stopped counts as gone after a terminate",
        "application/pods.py",
        "    return pod is not None and pod.status != POD_TERMINATED, error",
        '    return pod is not None and pod.status not in (POD_TERMINATED, "stopped"), error',
        (T_TERM,),
    ),
    Mutation(
        "a terminate's error is not kept",
        "application/pods.py",
        "        error = e.detail\n",
        '        error = ""\n',
        (T_TERM, T_RECON),
    ),
    # application/reactor.py: launch (R5), stop (R8), terminate (K2/K3)
    Mutation(
        "the reactor creates without looking the name up",
        "application/reactor.py",
        "            if found is not None and found.run_id in (None, run_id):",
        "            if False:",
        (T_DUP, T_RECON),
    ),
    Mutation(
        "the reactor adopts a same-named Pod of another run",
        "application/reactor.py",
        "            if found is not None and found.run_id in (None, run_id):",
        "            if found is not None:",
        (T_DUP,),
    ),
    Mutation(
        "a failed termination is confirmed",
        "application/reactor.py",
        "        still_listed, error = terminate_and_look(self.compute, key, pod_id)\n"
        "        if still_listed:\n            if run.pod_status",
        "        still_listed, error = terminate_and_look(self.compute, key, pod_id)\n"
        "        if False:\n            if run.pod_status",
        (T_TERM, T_RECON),
    ),
    Mutation(
        "a stop that failed is recorded as stopped",
        "application/reactor.py",
        "            if pod is None or pod.status != POD_STOPPED:",
        "            if False:",
        (T_RECON,),
    ),
    # adapters/vault.py: C6
    Mutation(
        "the secret's name is not bound to its ciphertext",
        "adapters/vault.py",
        'def _aad(org_id: str, name: str) -> bytes:\n    return f"{org_id}|{name}".encode()',
        'def _aad(org_id: str, name: str) -> bytes:\n    return f"{org_id}|".encode()',
        (T_VAULT,),
        args=("-k", "not postgres"),
    ),
    Mutation(
        "one fixed nonce for every secret",
        "adapters/vault.py",
        "            nonce = secrets.token_bytes(_NONCE_BYTES)\n            ciphertext",
        '            nonce = b"\\x00" * _NONCE_BYTES\n            ciphertext',
        (T_VAULT,),
        args=("-k", "not postgres"),
    ),
    Mutation(
        "a wrong master key's data key is not refused",
        "adapters/vault.py",
        "        aes = self._by_id.get(kid)\n        if aes is None:",
        "        aes = self._by_id.get(kid) or next(iter(self._by_id.values()))\n"
        "        if aes is None:",
        (T_VAULT,),
        args=("-k", "not postgres"),
    ),
    # projections/reports/charges.py: B1, B4
    Mutation(
        "sub-second times lose their microseconds",
        "projections/reports/charges.py",
        "    return Decimal(td.days * 86400 + td.seconds) + Decimal(td.microseconds) / 1_000_000",
        "    return Decimal(td.days * 86400 + td.seconds)",
        (T_CHARGES,),
    ),
    Mutation(
        "usage is not split at UTC hours",
        "projections/reports/charges.py",
        "    return t.astimezone(UTC).replace(minute=0, second=0, microsecond=0)",
        "    return t.astimezone(UTC).replace(second=0, microsecond=0)",
        (T_CHARGES,),
    ),
    Mutation(
        "RunPod's bill does not replace the estimate",
        "projections/reports/charges.py",
        "replace(g, billed_cost=s, estimated=False) for g, s in zip(group, shares",
        "replace(g, estimated=False) for g, s in zip(group, shares",
        (T_CHARGES,),
    ),
    # projections/reports/focus.py: B3
    Mutation(
        "FOCUS BilledCost is our estimate (both builders)",
        "projections/reports/focus.py",
        '        "BilledCost": _m(row.billed_cost),',
        '        "BilledCost": _m(row.list_cost),',
        (T_FOCUS,),
    ),
    Mutation(
        "FOCUS BilledCost column is our estimate",
        "projections/reports/focus.py",
        '    billed = money.take(column("billed_cost"))',
        '    billed = money.take(column("list_cost"))',
        (T_FOCUS,),
    ),
    Mutation(
        "FOCUS ListCost column is RunPod's bill",
        "projections/reports/focus.py",
        '    columns["ListCost"] = money.take(column("list_cost"))',
        '    columns["ListCost"] = money.take(column("billed_cost"))',
        (T_FOCUS,),
    ),
    # application/trainer_callbacks.py: a run's token (T1)
    Mutation(
        "any token is accepted for a run",
        "application/trainer_callbacks.py",
        '        if not hmac.compare_digest(self.token(run_id), token or ""):',
        "        if False:",
        (T_RUNS,),
        args=("-k", "token"),
    ),
    Mutation(
        "an ended run's token still works",
        "application/trainer_callbacks.py",
        "    if run.state in TERMINAL:\n        raise TrainerTokenExpired",
        "    if False:\n        raise TrainerTokenExpired",
        (T_REPORTS,),
    ),
    # application/adapter_check.py: R7 on the stored object
    Mutation(
        "a missing adapter object is not reported missing",
        "application/adapter_check.py",
        "    if info is None:\n        return AdapterVerdict(None, ADAPTER_MISSING",
        "    if False:\n        return AdapterVerdict(None, ADAPTER_MISSING",
        (T_RUNS,),
        args=("-k", "adapter"),
    ),
    Mutation(
        "the reported sha256 and size are not checked against the object",
        "application/adapter_check.py",
        "            sha256=sha256,\n            size_bytes=size_bytes,",
        "            sha256=None,\n            size_bytes=None,",
        (T_RUNS,),
        args=("-k", "adapter"),
    ),
)

# The mutations an earlier round proved caught; e2e tests, minutes each.
EARLIER = (
    Mutation(
        "run logs without the organization check",
        "api/actions/logs.py",
        "    run_doc(backend.views, caller.org_id, run_id)\n    found = backend.logs.read(",
        "    found = backend.logs.read(",
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


MUTATIONS = SAFETY + EARLIER


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


@dataclass
class Outcome:
    name: str
    path: str
    tests: list[str]
    verdict: str  # CAUGHT | SURVIVED | ERROR | BASELINE FAILED
    failed: list[str]
    errors: list[str]
    seconds: float
    equivalent: str = ""


def pytest_run(
    copy: Path, tests: tuple[str, ...], args: tuple[str, ...]
) -> tuple[list[str], list[str], int, str]:
    """(failed test ids, errored test ids, passed count, pytest's tail) of one run in `copy`."""
    report = copy / ".mutation-junit.xml"
    report.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(copy), "CI": "true"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "0",
            "-q",
            "-p",
            "no:cacheprovider",
            f"--junitxml={report}",
            *args,
            *tests,
        ],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    tail = (done.stdout + done.stderr)[-2000:]
    if not report.exists():  # pytest could not even start (a collection error, a crash)
        return [], [f"pytest exited {done.returncode} without a report"], 0, tail
    failed, errors, passed = [], [], 0
    # pytest's own report of a run in our scratch copy: not untrusted input
    for case in ET.parse(report).getroot().iter("testcase"):  # noqa: S314
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None:
            failed.append(test_id)
        elif case.find("error") is not None:
            errors.append(test_id)
        elif case.find("skipped") is None:
            passed += 1
    if done.returncode not in (0, 1) and not failed:  # interrupted, internal or usage error
        errors.append(f"pytest exited {done.returncode}")
    return failed, errors, passed, tail


def run_all(mutations: list[Mutation]) -> list[Outcome]:
    copy = scratch_copy()
    baselines: dict[tuple[tuple[str, ...], tuple[str, ...]], str] = {}
    outcomes = []
    try:
        for m in mutations:
            target = copy / m.path
            original = target.read_text()
            if original.count(m.old) != 1:
                raise SystemExit(f"{m.name}: the code to mutate is not in {m.path} exactly once")
            started = time.monotonic()
            key = (m.tests, m.args)
            if key not in baselines:
                failed, errors, passed, tail = pytest_run(copy, m.tests, m.args)
                bad = failed or errors or not passed
                baselines[key] = f"{failed + errors} {tail}" if bad else ""
                print(
                    f"  baseline of {' '.join(m.args + m.tests)}: "
                    f"{'FAILED ' + str(failed + errors) if bad else f'{passed} passed'}",
                    flush=True,
                )
            if baselines[key]:
                outcomes.append(
                    Outcome(m.name, m.path, list(m.tests), "BASELINE FAILED", [], [], 0.0)
                )
                continue
            target.write_text(original.replace(m.old, m.new))
            try:
                failed, errors, _, _ = pytest_run(copy, m.tests, m.args)
            finally:
                target.write_text(original)
            verdict = "CAUGHT" if failed else "ERROR" if errors else "SURVIVED"
            seconds = round(time.monotonic() - started, 1)
            outcomes.append(
                Outcome(
                    m.name,
                    m.path,
                    [*m.args, *m.tests],
                    verdict,
                    failed,
                    errors,
                    seconds,
                    m.equivalent,
                )
            )
            o = outcomes[-1]
            shown = f"caught by {', '.join(failed)}" if failed else verdict
            print(
                f"- {m.name} ({m.path}): {shown} [{seconds:.0f} s]"
                + (f" (equivalent: {m.equivalent})" if m.equivalent else ""),
                flush=True,
            )
            if o.errors and not failed:
                print(f"    errors: {', '.join(errors)}", flush=True)
    finally:
        shutil.rmtree(copy, ignore_errors=True)
    return outcomes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", help="run the mutations whose name contains this")
    parser.add_argument("--safety", action="store_true", help="only the safety modules' set")
    parser.add_argument("--record", help="write what ran, as JSON, to this file")
    args = parser.parse_args()
    chosen = [
        m for m in (SAFETY if args.safety else MUTATIONS) if not args.only or args.only in m.name
    ]
    outcomes = run_all(chosen)
    counted = [o for o in outcomes if not o.equivalent]
    killed = sum(o.verdict == "CAUGHT" for o in counted)
    rate = 100.0 * killed / len(counted) if counted else 0.0
    survivors = [o.name for o in counted if o.verdict != "CAUGHT"]
    print(
        f"kill rate: {killed}/{len(counted)} = {rate:.1f}% "
        f"({len(outcomes) - len(counted)} equivalent); not caught: {survivors or 'none'}"
    )
    if args.record:
        Path(args.record).write_text(
            json.dumps({"kill_rate": rate, "outcomes": [asdict(o) for o in outcomes]}, indent=1)
        )
    return 0 if not survivors else 1


if __name__ == "__main__":
    raise SystemExit(main())
