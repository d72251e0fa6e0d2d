"""A2/A4 for billing and audit: owner and finance see billing, owner and auditor see audit,
and no organization sees another's cost lines, events or aggregates (404, not 403)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from api.app import create_app
from application.services import Services
from entrypoints.bootstrap import Container, build
from entrypoints.settings import Settings
from tests.fakes import GOOD_KEY, FakeCompute, FakeObjectStore, FakeVault, FixedClock
from tests.integration.audit.conftest import CUSTOM, VOLUME
from tests.integration.billing.history import drive_history

ROLES = ("owner", "member", "auditor", "finance")


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[TestClient, dict[str, dict[str, str]], Container]]:
    clock = FixedClock()
    container = build(
        Settings(data_dir=tmp_path),
        compute=FakeCompute(),
        objects=FakeObjectStore(),
        vault=FakeVault(),
        clock=clock,
    )
    app: Services = container.services
    hists = drive_history(
        app,
        clock.advance,
        [("Acme", GOOD_KEY, VOLUME), ("Globex", GOOD_KEY, CUSTOM)],
        "NVIDIA A100 80GB PCIe",
        "1.64",
        days=2,
    )
    tokens = {
        h.org_id: {
            role: app.organizations.add_member(h.org_id, f"{role}@x.test", role).token
            for role in ROLES
        }
        for h in hists
    }
    container.catch_up()
    web = create_app(lambda: container, run_projectors=False)
    with TestClient(web) as client:
        yield client, tokens, container


def _h(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_a2_only_owner_and_finance_see_billing_only_owner_and_auditor_see_audit(api) -> None:  # type: ignore[no-untyped-def]
    client, tokens, _ = api
    org = next(iter(tokens))
    for role in ROLES:
        h = _h(tokens[org][role])
        billing_status = client.get("/v1/billing/costs?from=2026-11-01", headers=h).status_code
        export_status = client.get("/v1/billing/export?format=csv", headers=h).status_code
        audit_status = client.get("/v1/audit/events", headers=h).status_code
        verify_status = client.get("/v1/audit/verify", headers=h).status_code
        assert (billing_status, export_status) == (
            (200, 200) if role in ("owner", "finance") else (403, 403)
        ), role
        assert (audit_status, verify_status) == (
            (200, 200) if role in ("owner", "auditor") else (403, 403)
        ), role


def test_a4_no_organization_sees_another_organizations_lines_events_or_aggregates(api) -> None:  # type: ignore[no-untyped-def]
    client, tokens, _container = api
    acme, globex = list(tokens)
    acme_fin, globex_fin = _h(tokens[acme]["finance"]), _h(tokens[globex]["finance"])
    a = client.get("/v1/billing/costs?from=2026-11-01&group_by=resource", headers=acme_fin).json()
    g = client.get("/v1/billing/costs?from=2026-11-01&group_by=resource", headers=globex_fin).json()
    assert a["currency"] == "USD" and a["lines"] and g["lines"]
    assert not {x["key"] for x in a["lines"]} & {x["key"] for x in g["lines"]}
    focus = client.get("/v1/billing/export?from=2026-11-01&format=focus-csv", headers=acme_fin)
    assert focus.headers["content-disposition"].startswith("attachment;")
    assert globex.encode() not in focus.content and acme.encode() in focus.content

    acme_aud, globex_aud = _h(tokens[acme]["auditor"]), _h(tokens[globex]["auditor"])
    page = client.get("/v1/audit/events?limit=500", headers=acme_aud).json()
    ids = {e["aggregate_id"] for e in page["events"]}
    other = client.get("/v1/audit/events?limit=500", headers=globex_aud).json()
    assert ids and not ids & {e["aggregate_id"] for e in other["events"]}
    assert all(e["hash"] and e["actor"] for e in page["events"])
    run_event = next(e for e in other["events"] if e["type"] == "PodLaunched")
    foreign = f"/v1/audit/run/{run_event['aggregate_id']}?as_of={run_event['time']}"
    assert client.get(foreign, headers=acme_aud).status_code == 404
    mine = client.get(foreign, headers=globex_aud)
    assert mine.status_code == 200 and mine.json()["state"]["pod_status"] in ("running",)
    assert client.get("/v1/audit/verify", headers=acme_aud).json()["ok"] is True


def test_u1_u2_events_page_and_filter_and_state_as_of_a_past_time(api) -> None:  # type: ignore[no-untyped-def]
    client, tokens, _ = api
    org = next(iter(tokens))
    h = _h(tokens[org]["owner"])
    first = client.get("/v1/audit/events?limit=5", headers=h).json()
    assert len(first["events"]) == 5 and first["next_after"] == first["events"][-1]["position"]
    second = client.get(f"/v1/audit/events?limit=5&after={first['next_after']}", headers=h).json()
    assert second["events"][0]["position"] > first["next_after"]
    stopped = client.get("/v1/audit/events?type=PodStopped", headers=h).json()["events"]
    assert stopped and all(e["type"] == "PodStopped" for e in stopped)
    run_id = stopped[0]["aggregate_id"]
    only = client.get(f"/v1/audit/events?aggregate_id={run_id}&limit=1000", headers=h).json()
    assert {e["aggregate_id"] for e in only["events"]} == {run_id}
    before = client.get(f"/v1/audit/run/{run_id}?as_of={stopped[0]['time']}", headers=h).json()
    assert before["state"]["pod_status"] == "stopped"
    now = client.get(f"/v1/audit/run/{run_id}", headers=h).json()
    assert now["state"]["pod_status"] == "terminated"


def test_u3_verify_reports_a_head_to_keep_and_checks_it_when_given_back(api) -> None:  # type: ignore[no-untyped-def]
    client, tokens, _ = api
    acme = next(iter(tokens))
    h = _h(tokens[acme]["auditor"])
    first = client.get("/v1/audit/verify", headers=h).json()
    assert first["ok"] is True and first["count"] == first["events_checked"] > 0
    last = client.get("/v1/audit/events?limit=1000", headers=h).json()["events"][-1]
    assert (first["position"], first["head"]) == (last["position"], last["hash"])

    anchor = {"anchor_position": first["position"], "anchor_head": first["head"]}
    assert client.get("/v1/audit/verify", params=anchor, headers=h).json()["ok"] is True
    forged = {**anchor, "anchor_head": "0" * 64}  # what a rewritten history would answer
    body = client.get("/v1/audit/verify", params=forged, headers=h).json()
    assert body["ok"] is False and body["first_bad_position"] == first["position"]

    half = client.get("/v1/audit/verify", params={"anchor_position": 3}, headers=h)
    assert half.status_code == 422 and half.json()["type"].endswith("/invalid-anchor")
    assert client.get("/v1/audit/verify?anchor_head=xyz", headers=h).status_code == 422
