"""V1 on the working fakes: a crash between RunPod's create and our save leaves one endpoint,
adopted by name on the next drive; the adapter's serving copy names the served model; a delete
RunPod has not carried out yet keeps the deployment `deleting` until RunPod no longer lists the
endpoint; an endpoint whose maximum workers RunPod cut to 0 is raised before it is bound."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest

from application.billing import BillingReconciler
from application.deployments import (
    TICK_AFTER,
    ChatRateLimited,
    DeploymentService,
    KeyLacksServerless,
    ServingColdStart,
)
from application.errors import InsufficientPermissions, ProviderError, ProviderUnavailable
from application.ports import BillingRecord, ServingEndpoint, ServingWorkers
from application.services import Services
from application.serving_endpoints import EndpointReconciler
from domain.billing import ProviderBill
from domain.deployment import Deployment, EndpointBound, deployment_id
from domain.run import Run
from domain.serving_endpoints import ServingEndpoints
from domain.times import iso
from tests.fakes import FakeObjectStore, FixedClock
from tests.unit.application.test_reports import BUCKET, _launched, _reports, _write_mailbox


class FakeServing:
    """RunPod Serverless in memory: endpoints by id; knobs for the failures that matter."""

    def __init__(self) -> None:
        self.endpoints: dict[str, ServingEndpoint] = {}
        self.bodies: dict[str, dict[str, Any]] = {}
        self.creates = 0
        self.crash_after_create = False
        self.deletes_ignored = 0
        self.delete_fails_after_effect = 0  # the endpoint goes, then the answer is a 500
        self.deletes_404 = 0  # the endpoint went meanwhile (RunPod answers 404)
        self.up: dict[str, ServingWorkers] = {}  # endpoint id -> its workers up
        self.forbidden = False
        self.cold = False
        self.chats: list[dict[str, Any]] = []  # what reached the endpoint
        self.stream_usage = True  # False: a worker that ignores stream_options.include_usage

    def list_endpoints(self, api_key: str) -> list[ServingEndpoint]:
        if self.forbidden:
            raise InsufficientPermissions("403")
        return list(self.endpoints.values())

    def create_endpoint(self, api_key: str, body: dict[str, Any]) -> ServingEndpoint:
        self.creates += 1
        endpoint = ServingEndpoint(f"ep{self.creates}", body["name"], 0, body["workers"]["max"])
        self.endpoints[endpoint.id], self.bodies[endpoint.id] = endpoint, body
        if self.crash_after_create:
            self.crash_after_create = False
            raise ProviderUnavailable("the answer never came")
        return endpoint

    def patch_endpoint(
        self, api_key: str, endpoint_id: str, body: dict[str, Any]
    ) -> ServingEndpoint | None:
        found = self.endpoints[endpoint_id]
        self.endpoints[endpoint_id] = replace(found, workers_max=body["workers"]["max"])
        return self.endpoints[endpoint_id]

    def delete_endpoint(self, api_key: str, endpoint_id: str) -> None:
        if self.deletes_ignored:
            self.deletes_ignored -= 1
            return
        if self.deletes_404:
            self.deletes_404 -= 1
            self.endpoints.pop(endpoint_id, None)
            return  # the adapter reads RunPod's 404 as "gone"
        self.endpoints.pop(endpoint_id, None)
        if self.delete_fails_after_effect:
            self.delete_fails_after_effect -= 1
            raise ProviderError("RunPod answered HTTP 500 on Serverless")

    def workers(self, api_key: str, endpoint_id: str) -> ServingWorkers | None:
        if endpoint_id not in self.endpoints:
            return None
        return self.up.get(endpoint_id, ServingWorkers(0, 0, 0))

    def chat(
        self, api_key: str, endpoint_id: str, body: dict[str, Any], timeout_s: float
    ) -> tuple[int, dict[str, str], bytes]:
        if self.cold:
            raise ProviderUnavailable("timed out")
        self.chats.append(body)
        usage = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
        return 200, {}, json.dumps({"model": body["model"], "usage": usage}).encode()

    def billing(self, api_key: str, start: datetime, end: datetime) -> list[BillingRecord]:
        return []

    @contextmanager
    def chat_stream(
        self, api_key: str, endpoint_id: str, body: dict[str, Any], timeout_s: float
    ) -> Iterator[tuple[int, Iterator[bytes]]]:
        self.chats.append(body)

        def event(choices: list[Any], **more: Any) -> str:
            return "data: " + json.dumps({"choices": choices, **more}) + "\n\n"

        usage = {"usage": None} if self.stream_usage else {}
        events = [
            event([{"delta": {"role": "assistant", "content": ""}}], **usage),
            *(event([{"delta": {"content": w}}], **usage) for w in ("Blue", " sky", ".")),
        ]
        if self.stream_usage and body.get("stream_options", {}).get("include_usage"):
            events.append(event([], usage={"prompt_tokens": 9, "completion_tokens": 3}))
        text = "".join([*events, "data: [DONE]\n\n"]).encode()
        # Chunks cut across events, as bytes arrive from the network.
        yield 200, iter([text[i : i + 37] for i in range(0, len(text), 37)])


def _succeeded(world: Any) -> tuple[Services, FakeObjectStore, str, str]:
    app, objects, org, run_id, data = _launched(world)
    _write_mailbox(objects, run_id, _reports(run_id, data))
    app.reactor.reconcile_org(org, [run_id])
    app.reactor.drive_run(run_id)
    assert app.log.load(Run, run_id, org).state == "succeeded"
    return app, objects, org, run_id


@pytest.fixture
def deployed(world: Any) -> tuple[DeploymentService, FakeServing, FakeObjectStore, str, str]:
    app, objects, org, run_id = _succeeded(world)
    serving = FakeServing()
    service = DeploymentService(
        app.log,
        app.clock,
        serving,
        objects,
        app.connections.runpod_key,
        app.storage.location,
        lambda _org, _name: [],
    )
    return service, serving, objects, org, run_id


def test_a_crash_after_runpods_create_leaves_one_endpoint_adopted_by_name(
    deployed: tuple[DeploymentService, FakeServing, FakeObjectStore, str, str],
) -> None:
    service, serving, objects, org, run_id = deployed
    serving.crash_after_create = True
    with pytest.raises(ProviderUnavailable):
        service.deploy(org, run_id, "member")
    assert len(serving.endpoints) == 1  # it exists at RunPod; we never learned its id
    dep_id = service.deploy(org, run_id, "member").deployment_id  # the same deployment
    dep = service.log.load(Deployment, dep_id, org)
    assert dep.state == "ready" and dep.endpoint_id == "ep1"
    assert serving.creates == 1 and len(serving.endpoints) == 1
    bound = [e for e in service.log.events.get(dep.id) if isinstance(e, EndpointBound)]
    assert [e.created for e in bound] == [False]  # adopted, not created
    folder = f"serving/loras/{dep.adapter_name}"
    config = json.loads(objects.buckets[BUCKET][f"{folder}/adapter_config.json"])
    assert config["base_model_name_or_path"] == dep.served_model
    assert serving.bodies["ep1"]["workers"]["min"] == 0
    assert serving.bodies["ep1"]["networkVolumes"] == [BUCKET]
    status, _headers, body = service.chat(org, dep_id, {"messages": [], "model": "other"})
    assert status == 200 and json.loads(body)["model"] == dep.adapter_name


def test_delete_waits_until_runpod_no_longer_lists_the_endpoint(
    deployed: tuple[DeploymentService, FakeServing, FakeObjectStore, str, str],
) -> None:
    service, serving, objects, org, run_id = deployed
    dep_id = service.deploy(org, run_id, "member").deployment_id
    serving.deletes_ignored = 1  # RunPod answers the delete but still lists the endpoint
    service.delete(org, dep_id, "member")
    dep = service.log.load(Deployment, dep_id, org)
    assert dep.state == "deleting" and list(serving.endpoints) == ["ep1"]
    assert not any(k.startswith("serving/") for k in objects.buckets[BUCKET])
    service.drive(org, dep_id)
    assert service.log.load(Deployment, dep_id, org).state == "deleted"
    assert serving.endpoints == {}


@pytest.mark.parametrize("fault", ["delete_fails_after_effect", "deletes_404"])
def test_a_delete_that_failed_after_taking_effect_or_answered_404_confirms_gone(
    deployed: tuple[DeploymentService, FakeServing, FakeObjectStore, str, str], fault: str
) -> None:
    """V3: RunPod's list decides, not the delete's answer."""
    service, serving, _objects, org, run_id = deployed
    dep_id = service.deploy(org, run_id, "member").deployment_id
    setattr(serving, fault, 1)
    service.delete(org, dep_id, "member")
    assert service.log.load(Deployment, dep_id, org).state == "deleted"
    assert serving.endpoints == {}


def test_an_endpoint_runpod_cut_to_zero_workers_is_raised_and_a_cold_start_is_503(
    deployed: tuple[DeploymentService, FakeServing, FakeObjectStore, str, str],
) -> None:
    service, serving, _objects, org, run_id = deployed
    dep_id = service.deploy(org, run_id, "member").deployment_id
    service.delete(org, dep_id, "member")
    name = service.log.load(Deployment, dep_id, org).endpoint_name
    serving.endpoints["old"] = ServingEndpoint("old", name, 0, 0)  # idle for days: max 0
    service.deploy(org, run_id, "member")
    assert serving.endpoints["old"].workers_max == 2
    assert service.log.load(Deployment, dep_id, org).endpoint_id == "old"
    serving.cold = True
    with pytest.raises(ServingColdStart) as caught:
        service.chat(org, dep_id, {"messages": []})
    assert caught.value.status == 503 and caught.value.retry_after == 30


def test_a_key_without_serverless_rights_changes_nothing(
    deployed: tuple[DeploymentService, FakeServing, FakeObjectStore, str, str],
) -> None:
    service, serving, objects, org, run_id = deployed
    serving.forbidden = True
    with pytest.raises(KeyLacksServerless):
        service.deploy(org, run_id, "member")
    assert serving.endpoints == {}
    assert not any(k.startswith("serving/") for k in objects.buckets[BUCKET])


def test_runpods_serverless_bill_is_recorded_for_the_organizations_endpoints_only(
    world: Any,
) -> None:
    """V3: the billing reconciler reads RunPod's hourly serverless records and records those of
    endpoints the organization's deployments used, as it does for Pods."""
    app, _objects, org, _run_id = _succeeded(world)
    hour = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
    records = [
        BillingRecord("ep1", hour, hour + timedelta(hours=1), Decimal("0.01234")),
        BillingRecord("someone-elses", hour, hour + timedelta(hours=1), Decimal("5")),
    ]

    class Owned:
        def owned(self, org_id: str) -> set[tuple[str, str]]:
            return {("serverless", "ep1")}

    billing = BillingReconciler(
        app.log,
        app.billing.compute,
        app.clock,
        app.connections,
        app.billing.runs,
        owned=Owned(),
        serverless=lambda _key, _lo, _hi: records,
    )
    result = billing.reconcile(org, hour - timedelta(hours=1))
    assert result.charges_recorded == 1
    bill = app.log.load(ProviderBill, ProviderBill.id_for(org, hour.date()), org)
    assert bill.amounts == {f"serverless:ep1:{iso(hour)}": "0.01234"}
    assert billing.reconcile(org, hour - timedelta(hours=1)).charges_recorded == 0  # idempotent


def test_the_reconcile_tick_adopts_what_a_crash_left_deploying(
    deployed: tuple[DeploymentService, FakeServing, FakeObjectStore, str, str],
) -> None:
    """The process died between RunPod's create and our save: the tick's drive adopts the
    endpoint by name; nothing is created twice."""
    service, serving, _objects, org, run_id = deployed
    serving.crash_after_create = True
    with pytest.raises(ProviderUnavailable):
        service.deploy(org, run_id, "member")
    dep_id = deployment_id(org, run_id)
    asked: list[datetime] = []

    def unfinished(org_id: str, before: datetime) -> list[str]:
        asked.append(before)
        return [dep_id] if org_id == org else []

    service.unfinished = unfinished
    service.drive_unfinished(org)
    assert asked == [service.clock.now() - TICK_AFTER]
    dep = service.log.load(Deployment, dep_id, org)
    assert dep.state == "ready" and dep.endpoint_id == "ep1" and serving.creates == 1


def test_a_workers_failure_is_a_502_and_a_refusal_is_relayed(
    deployed: tuple[DeploymentService, FakeServing, FakeObjectStore, str, str],
) -> None:
    service, serving, _objects, org, run_id = deployed
    dep_id = service.deploy(org, run_id, "member").deployment_id
    answers = iter([(500, b'{"error": "CUDA out of memory"}'), (400, b'{"error": "bad"}')])

    def chat(*_args: Any) -> tuple[int, dict[str, str], bytes]:
        status, content = next(answers)
        return status, {}, content

    serving.chat = chat  # type: ignore[method-assign,assignment]
    with pytest.raises(ProviderError) as caught:
        service.chat(org, dep_id, {"messages": []})
    assert caught.value.status == 502 and "out of memory" in caught.value.detail
    assert service.chat(org, dep_id, {"messages": []}) == (400, {}, b'{"error": "bad"}')
    usage = service.usage([dep_id])[dep_id]
    assert (usage["requests"], usage["errors"]) == (2, 2)


def test_chat_restores_the_maximum_workers_runpod_cut_at_most_every_ten_minutes(
    deployed: tuple[DeploymentService, FakeServing, FakeObjectStore, str, str],
) -> None:
    service, serving, _objects, org, run_id = deployed
    dep_id = service.deploy(org, run_id, "member").deployment_id
    service.chat(org, dep_id, {"messages": []})
    serving.endpoints["ep1"] = replace(serving.endpoints["ep1"], workers_max=0)  # idle 7 days
    service.chat(org, dep_id, {"messages": []})
    assert serving.endpoints["ep1"].workers_max == 0  # checked a moment ago: not again yet
    assert isinstance(service.clock, FixedClock)
    service.clock.advance(11 * 60)
    service.chat(org, dep_id, {"messages": []})
    assert serving.endpoints["ep1"].workers_max == 2


def _streamed(service: DeploymentService, org: str, dep_id: str, **body: Any) -> list[Any]:
    with service.chat_stream(org, dep_id, {"messages": [], "stream": True, **body}) as (
        status,
        chunks,
    ):
        assert status == 200
        text = b"".join(chunks).decode()
    events = [e.removeprefix("data: ") for e in text.split("\n\n") if e]
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


def test_over_the_rate_limit_a_chat_is_refused_before_anything_reaches_runpod(
    deployed: tuple[DeploymentService, FakeServing, FakeObjectStore, str, str],
) -> None:
    """V2: the organization's bucket (two a minute here) refuses the third request with the
    seconds until a token is back; the window refills it."""
    service, serving, _objects, org, run_id = deployed
    dep_id = service.deploy(org, run_id, "member").deployment_id
    service.rate_limit, service.rate_window_s = 2, 60.0
    service.chat(org, dep_id, {"messages": []})
    _streamed(service, org, dep_id)
    with pytest.raises(ChatRateLimited) as caught:
        service.chat(org, dep_id, {"messages": []})
    assert (caught.value.status, caught.value.problem) == (429, "chat-rate-limited")
    assert caught.value.retry_after == 30  # one token every 30 s
    with pytest.raises(ChatRateLimited):
        _streamed(service, org, dep_id)
    assert len(serving.chats) == 2  # the refused ones reached nothing
    assert isinstance(service.clock, FixedClock)
    service.clock.advance(30)
    service.chat(org, dep_id, {"messages": []})
    assert len(serving.chats) == 3
    assert service.usage([dep_id])[dep_id]["requests"] == 3


def test_usage_counts_answers_tokens_a_streams_last_chunk_errors_and_cold_starts(
    deployed: tuple[DeploymentService, FakeServing, FakeObjectStore, str, str],
) -> None:
    service, serving, _objects, org, run_id = deployed
    dep_id = service.deploy(org, run_id, "member").deployment_id
    service.chat(org, dep_id, {"messages": []})  # usage 7 + 3
    # Streamed: the usage chunk is always asked for, and dropped unless the client asked.
    plain = _streamed(service, org, dep_id)
    assert serving.chats[-1]["stream_options"] == {"include_usage": True}
    assert [e["choices"][0]["delta"].get("content") for e in plain] == ["", "Blue", " sky", "."]
    asked = _streamed(service, org, dep_id, stream_options={"include_usage": True})
    assert asked[-1] == {"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 3}}
    # A worker that ignores include_usage: completion tokens are its content chunks.
    serving.stream_usage = False
    _streamed(service, org, dep_id)
    serving.cold = True
    with pytest.raises(ServingColdStart):
        service.chat(org, dep_id, {"messages": []})
    assert service.usage([dep_id]) == {
        dep_id: {
            "requests": 5,
            "prompt_tokens": 7 + 9 + 9,
            "completion_tokens": 3 + 3 + 3 + 3,
            "errors": 0,
            "cold_starts": 1,
        }
    }


def test_the_endpoint_pass_records_what_bills_finds_orphans_and_sees_them_go(
    deployed: tuple[DeploymentService, FakeServing, FakeObjectStore, str, str],
) -> None:
    """V3: ours with workers up is recorded with its price per hour, a hand-made endpoint with
    our naming is an orphan, another organization's and foreign names are left alone, and an
    endpoint RunPod no longer lists is gone; nothing changed records nothing."""
    service, serving, _objects, org, run_id = deployed
    dep = service.log.load(Deployment, service.deploy(org, run_id, "member").deployment_id, org)
    serving.endpoints["ep9"] = ServingEndpoint("ep9", "tensorant-serve-0000", 1, 2, ("AMPERE_48",))
    serving.endpoints["epX"] = ServingEndpoint("epX", "tensorant-serve-1111", 0, 2)
    serving.endpoints["epY"] = ServingEndpoint("epY", "someone-else", 0, 2)
    serving.up["ep1"] = ServingWorkers(1, 1, 0, ("ADA_24", "AMPERE_24"))
    owners = {"ep1": True, "ep9": False, "epX": None}
    passes = EndpointReconciler(
        service.log, serving, service.clock, service.runpod_key, lambda _o, i, _n: owners[i]
    )
    passes.reconcile(org)
    book = service.log.load(ServingEndpoints, ServingEndpoints.id_for(org), org)
    assert book.endpoints == {
        "ep1": {
            "name": dep.endpoint_name,
            "orphan": False,
            "workers_up": 2,
            "workers_min": 0,
            "workers_max": 2,
            "price_per_hour": str((Decimal("0.00019") + Decimal("0.00019")) * 3600),
        },
        "ep9": {  # no worker yet, but RunPod keeps one up: at the first pool's price
            "name": "tensorant-serve-0000",
            "orphan": True,
            "workers_up": 0,
            "workers_min": 1,
            "workers_max": 2,
            "price_per_hour": str(Decimal("0.00034") * 3600),
        },
    }
    version = book.version
    passes.reconcile(org)  # nothing changed: nothing recorded
    assert service.log.load(ServingEndpoints, book.id, org).version == version
    del serving.endpoints["ep9"]
    serving.up["ep1"] = ServingWorkers(0, 0, 0)
    passes.reconcile(org)
    book = service.log.load(ServingEndpoints, book.id, org)
    assert list(book.endpoints) == ["ep1"] and book.endpoints["ep1"]["workers_up"] == 0
