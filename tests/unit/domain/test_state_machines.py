"""Property: random command sequences never reach an illegal state; refusals save nothing;
replaying what was saved rebuilds an equal aggregate, on SQLite and on PostgreSQL."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from eventsourcing.application import Application
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain.connection import Connection
from domain.errors import DomainError
from domain.organization import Organization
from domain.run import POD_LIVE, STATES, TERMINAL, Run
from domain.storage import Storage
from tests.builders import small_trial

T0 = datetime(2026, 11, 1, tzinfo=UTC)
CONFIG = small_trial()
P = Decimal("0.60")

Command = Callable[[Any, int, datetime], None]

RUN_COMMANDS: list[Command] = [
    lambda r, n, t: r.update_draft(replace(CONFIG, gpu_count=1 + n % 3), "u", t),
    lambda r, n, t: r.discard("u", t),
    lambda r, n, t: r.confirm_launch(P, P, "EU-RO-1", "u", t),
    lambda r, n, t: r.reject_launch("price-above-limit", "", "u", t),
    lambda r, n, t: r.record_pod_launched(f"pod{n % 2}", "name", P, "EU-RO-1", None, 20, 0, "s", t),
    lambda r, n, t: r.launch_failed("capacity", "", "s", t),
    lambda r, n, t: r.start_training("s", t),
    lambda r, n, t: r.start_export("s", t),
    lambda r, n, t: r.record_adapter_exported("k", f"{n % 2}" * 64, 10, "s", t),
    lambda r, n, t: r.record_export_failed("export_failed", "", "s", t),
    lambda r, n, t: r.reach_runtime_limit("s", t),
    lambda r, n, t: r.record_adapter_verified("k", "a" * 64, 10, "s", t),
    lambda r, n, t: r.record_verification_failed("adapter_invalid", "", "s", t),
    lambda r, n, t: r.record_pod_stopped("export_failed", "s", t),
    lambda r, n, t: r.record_pod_resumed(P, None, "u", t),
    lambda r, n, t: r.request_recovery("volume", "k", None, None, "u", t),
    lambda r, n, t: r.request_release(n % 2 == 0, "u", t),
    lambda r, n, t: r.cancel("u", t),
    lambda r, n, t: r.record_termination_failed("boom", 3, "s", t),
    lambda r, n, t: r.record_pod_terminated("s", t),
    lambda r, n, t: r.record_pod_vanished("s", t),
]

CONNECTION_COMMANDS: list[Command] = [
    lambda c, n, t: c.save(f"acct{n % 2}", f"…K{n % 3}", P, P, "u", t),
    lambda c, n, t: c.rotate(f"acct{n % 2}", f"…K{n % 3}", P, P, n % 2, "u", t),
    lambda c, n, t: c.disconnect(n % 2, "u", t),
    lambda c, n, t: c.record_write_use(("launch", "release")[n % 2], f"…K{n % 3}", "s", t),
    lambda c, n, t: c.refresh_account(Decimal(n), P, "s", t),
    lambda c, n, t: c.record_check_failed("invalid-key", "", "u", t),
]

STORAGE_COMMANDS: list[Command] = [
    lambda s, n, t: s.bind_volume(
        f"vol{n % 2}",
        ("EU-RO-1", "CA-MTL-1")[n % 2 if n % 5 == 0 else 0],
        "https://e",
        100,
        "…A",
        "u",
        t,
    ),
    lambda s, n, t: s.bind_custom_s3(
        "https://s3.example.com", f"b{n % 2}", "us-east-1", "…B", "u", t
    ),
    lambda s, n, t: s.rotate_credentials(f"…C{n % 3}", "u", t),
    lambda s, n, t: s.lock("p", "u", t),
    lambda s, n, t: s.resize(50 + n * 10, "u", t),
    lambda s, n, t: s.record_check_failed("s3", "write", "", "u", t),
]

ORG_COMMANDS: list[Command] = [
    lambda o, n, t: o.add_member(
        f"u{n}", f"m{n % 4}@x.io", ("owner", "member", "x")[n % 3], "h", "u", t
    ),
    lambda o, n, t: o.ensure_may_bring_own_connections(),
]


def state_of(agg: Any) -> dict[str, Any]:
    return {k: v for k, v in vars(agg).items() if k != "_pending_events"}


def drive(agg: Any, commands: list[Command], steps: list[tuple[int, int]]) -> None:
    t = T0
    for index, n in steps:
        t += timedelta(seconds=1)
        before_state, before_events = copy.deepcopy(state_of(agg)), len(agg.pending_events)
        try:
            commands[index % len(commands)](agg, n, t)
        except DomainError:
            assert len(agg.pending_events) == before_events, "a refused command emitted events"
            assert state_of(agg) == before_state, "a refused command changed state"
        check_invariants(agg)


def check_invariants(agg: Any) -> None:
    if isinstance(agg, Run):
        check_run_invariants(agg)
    if isinstance(agg, Connection) and agg.status == "connected":
        assert agg.account_id and agg.key_fingerprint
        if agg.write_permission == "proven":
            assert {"launch", "release"} <= set(agg.write_uses)
    if isinstance(agg, Storage) and agg.locked:
        assert agg.status == "connected"


def check_run_invariants(agg: Run) -> None:
    assert agg.state in (*STATES, "discarded")
    if agg.pod_id is None:
        assert agg.pod_status == "none"
    if agg.state in ("running", "exporting"):
        assert agg.pod_status in POD_LIVE
    if agg.state == "verifying":  # or the trainer reported before the Pod was recorded
        assert agg.pod_status in POD_LIVE or (agg.pod_id is None and agg.exported)
    if agg.state == "succeeded":
        assert agg.adapter is not None
    # Why `failed`/`succeeded` in resume's and release's allowed states, and the check for
    # a verifying run without an export, are unreachable (docs/mutation.md, equivalent).
    if agg.state in ("failed", "succeeded"):
        assert agg.pod_status not in ("running", "stopped")
    if agg.state == "verifying":
        assert agg.exported is not None
    # A live run is cancelling exactly when its termination is for a cancel, and a live
    # Pod always has an id (why other mutants of run.py are equivalent, docs/mutation.md).
    if agg.state not in TERMINAL:
        assert (agg.state == "cancelling") == (agg.termination_intent == "cancel")
    if agg.pod_status in POD_LIVE:
        assert agg.pod_id
    if agg.state in TERMINAL:
        assert agg.ended_at is not None or agg.state == "discarded"


steps_strategy = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 100)), max_size=40)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    run_steps=steps_strategy,
    conn_steps=steps_strategy,
    storage_steps=steps_strategy,
    org_steps=steps_strategy,
)
def test_random_command_sequences_stay_legal_and_replay_equal(
    event_store_env: dict[str, Any],
    run_steps: list[tuple[int, int]],
    conn_steps: list[tuple[int, int]],
    storage_steps: list[tuple[int, int]],
    org_steps: list[tuple[int, int]],
) -> None:
    org = Organization.create("Acme", "own", "u", T0)
    org_id = str(org.id)
    run = Run.draft(org_id, CONFIG, "u", T0)
    conn = Connection.open(org_id, "u", T0)
    storage = Storage.open(org_id, "u", T0)
    drive(run, RUN_COMMANDS, run_steps)
    drive(conn, CONNECTION_COMMANDS, conn_steps)
    drive(storage, STORAGE_COMMANDS, storage_steps)
    drive(org, ORG_COMMANDS, org_steps)
    app = Application(env=event_store_env)
    try:
        app.save(org, run, conn, storage)
        for agg in (org, run, conn, storage):
            assert state_of(app.repository.get(agg.id)) == state_of(agg)
    finally:
        app.close()


@pytest.mark.parametrize("steps", [[(2, 0), (4, 0), (8, 0), (11, 0), (19, 0)]])
def test_the_happy_path_of_a_run_reaches_succeeded(steps: list[tuple[int, int]]) -> None:
    run = Run.draft("org", CONFIG, "u", T0)
    drive(run, RUN_COMMANDS, steps)
    assert run.state == "succeeded"
