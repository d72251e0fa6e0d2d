"""R20 without a server: what the `webhook_outbox` projection makes of the log (which events,
to which endpoints, once per position), how the deliverer signs, backs off and records, and the
signature a receiver verifies (docs/webhooks.md)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.sql import SQL, Identifier

from application.webhooks import DeliveryFailed
from domain.connection import Connection
from domain.run import Run
from domain.webhook import (
    SignatureInvalid,
    WebhookEndpoint,
    backoff_seconds,
    signature_header,
    vault_name,
    verify_signature,
)
from projections.store.base import INDEX, ViewStore
from projections.store.postgres import PostgresViewStore
from projections.store.urls import open_view_store
from projections.webhooks import (
    WEBHOOK_OUTBOX,
    Deliverer,
    DeliveryPolicy,
    WebhookOutbox,
    body_of,
    deliveries,
)
from tests.builders import small_trial
from tests.conftest import require_postgres
from tests.fakes import FakeVault

T0 = datetime(2026, 11, 1, tzinfo=UTC)
ORG = "org-1"


class Log:
    """Events applied in order, each at the next position, as the engine would."""

    def __init__(self, store: ViewStore) -> None:
        self.store, self.view = store, WebhookOutbox()
        self.position = store.position(WEBHOOK_OUTBOX)

    def apply(self, *aggregates: Any) -> None:
        with self.store.batch(WEBHOOK_OUTBOX) as b:
            for agg in aggregates:
                for event in agg.collect_events():
                    self.position += 1
                    self.view.apply(b, event, self.position)
                    b.set_position(self.position)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ViewStore]:
    """The deliverer writes beside the projector on both stores (the same test bodies)."""
    if request.param == "sqlite":
        with open_view_store(f"sqlite:///{tmp_path / 'v.db'}") as found:
            yield found
        return
    url = require_postgres()
    schema = f"twh_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(SQL("CREATE SCHEMA {}").format(Identifier(schema)))
    try:
        with PostgresViewStore(url, schema=schema, max_size=2) as found:
            yield found
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(Identifier(schema)))


def _endpoint(events: list[str], url: str = "https://hooks.example.com/x") -> WebhookEndpoint:
    return WebhookEndpoint.register(ORG, url, events, "u", T0)


def _kinds(store: ViewStore, endpoint: WebhookEndpoint) -> list[tuple[str, str | None]]:
    got = reversed(deliveries(store, ORG, str(endpoint.id)))
    return [(d["type"], d["payload"]["data"].get("state")) for d in got]


def test_each_endpoint_gets_what_it_subscribed_to_from_its_registration_on(
    store: ViewStore,
) -> None:
    log = Log(store)
    early = Run.draft(ORG, small_trial(), "u", T0)
    log.apply(early)  # before any endpoint: delivered to none
    states, everything = _endpoint(["run.state_changed"]), _endpoint([])
    log.apply(states, everything)
    run = Run.draft(ORG, small_trial(), "u", T0)
    run.confirm_launch(Decimal("0.6"), Decimal("0.6"), "EU-RO-1", "u", T0)
    run.record_pod_launched("pod1", "n", Decimal("0.6"), "EU-RO-1", "h", 20, 50, "s", T0)
    run.record_export_failed("export_failed", "", "s", T0)
    run.record_pod_stopped("export_failed", "s", T0)  # needs_recovery, Pod retained
    run.cancel("u", T0 + timedelta(minutes=1))  # cancelled: the stopped Pod still bills
    low = Run.draft(ORG, small_trial(), "u", T0)
    low.reject_launch("low-balance", "balance 0.10 < 1 h", "u", T0)
    log.apply(run, low)
    assert _kinds(store, states) == [
        ("run.state_changed", "draft"),
        ("run.state_changed", "launching"),
        ("run.state_changed", "running"),
        ("run.state_changed", "needs_recovery"),
        ("run.state_changed", "cancelled"),
        ("run.state_changed", "draft"),
    ]
    assert _kinds(store, everything) == [
        *_kinds(store, states)[:5],
        ("pod.still_billing", "cancelled"),
        ("run.state_changed", "draft"),
        ("balance.low", None),
    ]
    sent = deliveries(store, ORG, str(everything.id))
    billing = next(d["payload"] for d in sent if d["type"] == "pod.still_billing")
    assert billing["data"] == {
        "run_id": str(run.id),
        "pod_id": "pod1",
        "pod_status": "stopped",
        "state": "cancelled",
    }
    # One event id per event, the same for every endpoint (the receivers' idempotency key).
    a, b = deliveries(store, ORG, str(states.id)), deliveries(store, ORG, str(everything.id))
    assert a[-1]["event_id"] == b[-1]["event_id"] and a[-1]["event_id"] != a[-2]["event_id"]


def test_a_termination_needing_manual_action_is_told_and_a_removed_endpoint_gets_nothing(
    store: ViewStore,
) -> None:
    log = Log(store)
    kept, dropped = _endpoint(["cleanup.needs_manual"]), _endpoint([])
    run = Run.draft(ORG, small_trial(), "u", T0)
    run.confirm_launch(Decimal("0.6"), Decimal("0.6"), "EU-RO-1", "u", T0)
    run.record_pod_launched("pod1", "n", Decimal("0.6"), "EU-RO-1", "h", 20, 50, "s", T0)
    log.apply(kept, dropped, run)
    dropped.remove("u", T0)
    log.apply(dropped)
    run.cancel("u", T0)
    run.record_termination_failed("boom", 1, "s", T0)
    run.record_termination_failed("boom again", 1, "s", T0)  # already needs_manual: once
    log.apply(run)
    assert _kinds(store, kept) == [("cleanup.needs_manual", None)]
    told = deliveries(store, ORG, str(kept.id))[0]["payload"]["data"]
    assert told == {"run_id": str(run.id), "pod_id": "pod1", "attempts": 1}
    assert len(deliveries(store, ORG, str(dropped.id))) == 3  # draft, launching, running
    pending = store.list(WEBHOOK_OUTBOX, INDEX, "pending:")
    assert len(pending) == 4


class Transport:
    def __init__(self, answers: list[int | Exception]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, bytes, dict[str, str]]] = []

    def post(self, url: str, body: bytes, headers: dict[str, str], timeout: float) -> int:
        self.sent.append((url, body, headers))
        answer = self.answers.pop(0) if self.answers else 200
        if isinstance(answer, Exception):
            raise answer
        return answer


class Wall:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _one_pending(store: ViewStore, vault: FakeVault) -> WebhookEndpoint:
    endpoint = _endpoint(["run.state_changed"])
    vault.put(ORG, vault_name(str(endpoint.id)), "whsec_test")
    Log(store).apply(endpoint, Run.draft(ORG, small_trial(), "u", T0))
    return endpoint


def test_the_deliverer_backs_off_records_every_attempt_and_signs_each(store: ViewStore) -> None:
    vault, wall = FakeVault(), Wall()
    endpoint = _one_pending(store, vault)
    refused = DeliveryFailed("could not connect: ConnectError")
    transport = Transport([500, refused, 503])
    policy = DeliveryPolicy(backoff_base_s=10, backoff_max_s=25, max_attempts=5)
    deliverer = Deliverer(store, vault, transport, policy, wall=wall)
    waits = []
    for _ in range(4):
        assert deliverer.run_once() == 1
        assert deliverer.run_once() == 0  # not due again before its backoff
        doc = deliveries(store, ORG, str(endpoint.id))[0]
        if doc["status"] == "delivered":
            break
        due = datetime.fromisoformat(doc["next_attempt_at"]).timestamp()
        waits.append(round(due - wall.now))
        wall.now = due
    assert waits == [10, 20, 25]  # doubling, capped
    assert doc["status"] == "delivered" and doc["attempts"] == 4
    assert [a["status_code"] for a in doc["attempt_log"]] == [500, None, 503, 200]
    assert doc["attempt_log"][1]["error"] == "could not connect: ConnectError"
    bodies = {body for _u, body, _h in transport.sent}
    assert bodies == {body_of(doc["payload"])}  # the same bytes on every attempt
    keys = {h["Idempotency-Key"] for _u, _b, h in transport.sent}
    assert keys == {doc["event_id"]}
    for _u, body, headers in transport.sent:
        verify_signature("whsec_test", headers["Tensorant-Signature"], body, wall.now, 3600)
    assert store.list(WEBHOOK_OUTBOX, INDEX, "pending:") == []


def test_the_deliverer_gives_up_after_the_last_attempt(
    store: ViewStore,
) -> None:
    vault, wall = FakeVault(), Wall()
    endpoint = _one_pending(store, vault)
    policy = DeliveryPolicy(backoff_base_s=1, backoff_max_s=1, max_attempts=2)
    deliverer = Deliverer(store, vault, Transport([500, 500, 500]), policy, wall=wall)
    deliverer.run_once()
    wall.now += 1
    deliverer.run_once()
    doc = deliveries(store, ORG, str(endpoint.id))[0]
    assert (doc["status"], doc["attempts"], doc["next_attempt_at"]) == ("failed", 2, None)
    assert doc["last_error"] == "the endpoint answered HTTP 500"
    wall.now += 100
    assert deliverer.run_once() == 0


def test_a_delivery_to_a_removed_endpoint_is_cancelled_unsent(store: ViewStore) -> None:
    vault, transport = FakeVault(), Transport([])
    deliverer = Deliverer(store, vault, transport, wall=Wall())
    other = _one_pending(store, vault)
    other.remove("u", T0)
    Log(store).apply(other)
    assert deliverer.run_once() == 0
    assert deliveries(store, ORG, str(other.id))[0]["status"] == "cancelled"
    assert transport.sent == []


def test_a_balance_falling_below_the_warning_is_told_once_until_it_recovers(
    store: ViewStore,
) -> None:
    log = Log(store)
    hook = _endpoint(["balance.low"])
    account = Connection.open(ORG, "u", T0)
    log.apply(hook, account)
    account.save("acct1", "…GOOD", Decimal("500"), Decimal("2"), "u", T0)  # 250 h: fine
    log.apply(account)
    for balance in ("400", "300", "200", "1000", "20"):  # below 168 h at $2/h: 300, 200, 20
        account.refresh_account(Decimal(balance), Decimal("2"), "s", T0)
        log.apply(account)
    told = [d["payload"]["data"] for d in reversed(deliveries(store, ORG, str(hook.id)))]
    assert [(d["balance"], d["hours_left"]) for d in told] == [("300", "150.0"), ("20", "10.0")]
    assert all(d["spend_per_hour"] == "2" for d in told)


def test_an_endpoint_that_fails_waits_for_the_next_round_and_holds_back_no_other(
    store: ViewStore,
) -> None:
    vault, wall = FakeVault(), Wall()
    down_url, up_url = "https://down.example.com/x", "https://up.example.com/x"
    down = _endpoint(["run.state_changed"], down_url)
    up = _endpoint(["run.state_changed"], up_url)
    for e in (down, up):
        vault.put(ORG, vault_name(str(e.id)), "whsec_test")
    runs = [Run.draft(ORG, small_trial(), "u", T0) for _ in range(3)]
    Log(store).apply(down, up, *runs)

    class ByUrl(Transport):
        def post(self, url: str, body: bytes, headers: dict[str, str], timeout: float) -> int:
            self.sent.append((url, body, headers))
            if url == down_url:
                raise DeliveryFailed("no answer within 10 s")
            return 200

    transport = ByUrl([])
    deliverer = Deliverer(store, vault, transport, wall=wall)
    assert set(deliverer.by_endpoint()) == {str(down.id), str(up.id)}
    assert deliverer.run_once() == 4  # one attempt at the endpoint that is down, three at the other
    sent = [u for u, _b, _h in transport.sent]
    assert sorted(sent) == sorted([down_url] + [up_url] * 3)
    assert [d["attempts"] for d in reversed(deliveries(store, ORG, str(down.id)))] == [1, 0, 0]
    assert {d["status"] for d in deliveries(store, ORG, str(down.id))} == {"pending"}
    assert {d["status"] for d in deliveries(store, ORG, str(up.id))} == {"delivered"}


def test_a_receiver_verifies_the_signature_within_the_replay_window() -> None:
    body, now = b'{"id":"evt_1"}', int(time.time())
    header = signature_header("whsec_a", now, body)
    assert header.startswith(f"t={now},v1=") and len(header.split("v1=")[1]) == 64
    assert verify_signature("whsec_a", header, body, now + 299) == now
    for secret, sent, at in (
        ("whsec_b", body, now),  # another secret
        ("whsec_a", body + b" ", now),  # another body
        ("whsec_a", body, now + 301),  # replayed after the window
        ("whsec_a", body, now - 301),  # from the future
    ):
        with pytest.raises(SignatureInvalid):
            verify_signature(secret, header, sent, at)
    with pytest.raises(SignatureInvalid):
        verify_signature("whsec_a", "v1=abc", body, now)
    # While a secret is replaced a sender may sign twice: either signature verifies.
    both = f"{header},v1={signature_header('whsec_b', now, body).split('v1=')[1]}"
    assert verify_signature("whsec_b", both, body, now) == now


def test_the_snippet_in_docs_webhooks_md_verifies_what_the_sender_signs() -> None:
    doc = (Path(__file__).resolve().parents[3] / "docs" / "webhooks.md").read_text()
    snippet = doc.split("```python\n", 1)[1].split("```", 1)[0]
    scope: dict[str, Any] = {}
    exec(snippet, scope)  # noqa: S102 - our own documentation's code
    verify = scope["verify"]
    body, now = b'{"id":"evt_1","type":"run.state_changed"}', int(time.time())
    header = signature_header("whsec_a", now, body)
    assert verify("whsec_a", header, body) is True
    assert verify("whsec_b", header, body) is False
    assert verify("whsec_a", header, body + b" ") is False
    assert verify("whsec_a", signature_header("whsec_a", now - 400, body), body) is False


def test_backoff_doubles_from_the_base_and_stops_at_the_cap() -> None:
    assert [backoff_seconds(n, 5, 60) for n in range(6)] == [0, 5, 10, 20, 40, 60]
    assert backoff_seconds(500, 5, 3600) == 3600
