"""Managed serving (V1, V2): deploy a succeeded run's adapter, list, delete, chat."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from api.deps import Backend, Caller, settler
from api.schemas.deployments import DeploymentPublic, DeploymentUsage
from application.deployments import DeploymentService
from domain.errors import NotFound
from projections.store.base import Doc, ViewStore
from projections.views import deployments as view


def _service(backend: Backend) -> DeploymentService:
    service = backend.services.deployments
    assert service is not None, "build_services wires the deployment service"
    return service


def public(
    views: ViewStore, org_id: str, doc: Doc, usage: dict[str, int] | None
) -> DeploymentPublic:
    skip = ("chat_url", "endpoint_cost", "usage")
    fields = {k: doc.get(k) for k in DeploymentPublic.model_fields if k not in skip}
    cost = view.endpoint_cost(views, org_id, list(doc.get("endpoints_used") or []))
    return DeploymentPublic(
        **fields,
        endpoint_cost=str(cost),
        chat_url=f"/v1/deployments/{doc['id']}/chat/completions",
        usage=DeploymentUsage(**(usage or {})),
    )


def listing(*, backend: Backend, caller: Caller) -> list[DeploymentPublic]:
    docs = view.deployments(backend.views, caller.org_id)
    usage = _service(backend).usage([str(doc["id"]) for doc in docs])
    return [public(backend.views, caller.org_id, d, usage.get(str(d["id"]))) for d in docs]


def one(*, backend: Backend, caller: Caller, deployment_id: str) -> DeploymentPublic:
    doc = view.deployment(backend.views, caller.org_id, deployment_id)
    if doc is None:  # another organization's deployment looks exactly like a missing one (A4)
        raise NotFound(f"deployment {deployment_id} not found")
    usage = _service(backend).usage([deployment_id]).get(deployment_id)
    return public(backend.views, caller.org_id, doc, usage)


def deploy(*, backend: Backend, caller: Caller, run_id: str) -> DeploymentPublic:
    made = _service(backend).deploy(caller.org_id, run_id, caller.actor)
    settler(backend)(made.position)
    return one(backend=backend, caller=caller, deployment_id=made.deployment_id)


def delete(*, backend: Backend, caller: Caller, deployment_id: str) -> DeploymentPublic:
    one(backend=backend, caller=caller, deployment_id=deployment_id)
    settler(backend)(_service(backend).delete(caller.org_id, deployment_id, caller.actor))
    return one(backend=backend, caller=caller, deployment_id=deployment_id)


def chat(
    *, backend: Backend, caller: Caller, deployment_id: str, body: dict[str, Any]
) -> tuple[int, dict[str, str], bytes]:
    return _service(backend).chat(caller.org_id, deployment_id, body)


def chat_stream(
    *, backend: Backend, caller: Caller, deployment_id: str, body: dict[str, Any]
) -> tuple[int, Iterator[bytes]]:
    """The stream's status and chunks; a refusal (not ready, no worker in time, the worker
    failed) is raised before the first chunk, so the caller answers it as problem+json."""
    manager = _service(backend).chat_stream(caller.org_id, deployment_id, body)
    status, chunks = manager.__enter__()

    def relay() -> Iterator[bytes]:
        try:
            yield from chunks
        finally:
            manager.__exit__(None, None, None)

    return status, relay()
