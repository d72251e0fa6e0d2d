"""Routes that serialize their own models (`json_response`) answer the same bytes,
status and content type as FastAPI's `response_model` path would for the same models."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Response
from fastapi.testclient import TestClient

from api.responses import json_response
from api.schemas.cleanup import CleanupItem, CleanupPublic
from api.schemas.connections import ComputeCard, Connections, StorageCard
from api.schemas.runs import RunPublic

RUN: dict[str, Any] = {
    "id": "r-1",
    "state": "running",
    "kind": "trial",
    "project_id": "p-1",
    "dataset_version_id": "d-1",
    "base_model": "Qwen/Qwen2.5-0.5B-Instruct",
    "gpu_type_id": "NVIDIA A100 80GB PCIe",
    "gpu_count": 1,
    "price_limit_per_hour": "3.00",
    "max_runtime_minutes": 60,
    "runtime_seconds": 61,
    "cost_so_far": "0.0279",
    "cleanup": {"pod_status": "running", "since": None, "attempts": 0, "last_error": None},
    "actions": dict.fromkeys(
        ("edit", "delete", "launch", "resume", "release", "recover_verify", "recover_upload"),
        False,
    )
    | {"cancel": True},
    "progress": {"step": 3, "loss": 1.25, "via": "pod_logs", "note": "é ✓ \u2028"},
    "exported": {"nested": [1, 2.5, None, True]},
    "created_at": "2026-12-01T10:00:00Z",
    "updated_at": "2026-12-01T10:01:01Z",
}


def both(shape: Any, content: Any) -> tuple[Response, Response]:
    app = FastAPI()

    @app.get("/model", response_model=shape)
    def by_model() -> Any:
        return content

    @app.get("/own")
    def by_route() -> Response:
        return json_response(shape, content)

    with TestClient(app) as client:
        return client.get("/model"), client.get("/own")


def test_a_list_of_runs_is_byte_for_byte_what_response_model_gives() -> None:
    runs = [RunPublic(**RUN), RunPublic(**{**RUN, "id": "r-2", "progress": None})]
    model, own = both(list[RunPublic], runs)
    assert own.content == model.content
    assert own.headers["content-type"] == model.headers["content-type"] == "application/json"
    assert own.status_code == model.status_code == 200
    assert b'"loss":1.25' in own.content


def test_one_run_connections_and_cleanup_too() -> None:
    for shape, content in (
        (RunPublic, RunPublic(**RUN)),
        (
            Connections,
            Connections(
                compute=ComputeCard(status="connected", balance="12.50", account_id="u_ü"),
                storage=StorageCard(status="not_connected"),
            ),
        ),
        (
            CleanupPublic,
            CleanupPublic(
                items=[
                    CleanupItem(
                        kind="orphan",
                        pod_id="p",
                        run_id=None,
                        since="2026-12-01T10:00:00Z",
                        cost_so_far="1.0000",
                        storage_cost_per_hour="0.010000",
                        attempts=2,
                        last_error="boom",
                    )
                ],
                balance_warning="low",
            ),
        ),
    ):
        model, own = both(shape, content)
        assert own.content == model.content, shape
        assert own.headers["content-length"] == model.headers["content-length"]
