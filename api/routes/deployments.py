"""`/v1/deployments` (V1, V2): a succeeded run's adapter served from a RunPod Serverless endpoint
on the organization's own account, and an OpenAI-compatible chat route per deployment."""

from __future__ import annotations

from fastapi import APIRouter, Response, status
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from api.actions import deployments
from api.deps import BackendDep, Reader, RunManager
from api.schemas.common import AUTHENTICATED, problem_responses
from api.schemas.deployments import ChatIn, DeploymentIn, DeploymentPublic

router = APIRouter(prefix="/v1/deployments", tags=["deployments"], responses=AUTHENTICATED)


@router.post("", status_code=status.HTTP_202_ACCEPTED, response_model=DeploymentPublic)
def create(body: DeploymentIn, caller: RunManager, backend: BackendDep) -> DeploymentPublic:
    """V1: the run's verified adapter is unpacked into the serving directory on the network
    volume, read back and checked, and served by the organization's endpoint for its base model
    (created on first use, found by name otherwise). 409 `serving-needs-network-volume` on
    custom S3; 422 `key-lacks-serverless` when the key may not use Serverless."""
    return deployments.deploy(backend=backend, caller=caller, run_id=body.run_id)


@router.get("", response_model=list[DeploymentPublic])
def list_deployments(caller: Reader, backend: BackendDep) -> list[DeploymentPublic]:
    return deployments.listing(backend=backend, caller=caller)


@router.get("/{deployment_id}", response_model=DeploymentPublic)
def get(deployment_id: str, caller: Reader, backend: BackendDep) -> DeploymentPublic:
    return deployments.one(backend=backend, caller=caller, deployment_id=deployment_id)


@router.delete(
    "/{deployment_id}", status_code=status.HTTP_202_ACCEPTED, response_model=DeploymentPublic
)
def delete(deployment_id: str, caller: RunManager, backend: BackendDep) -> DeploymentPublic:
    """The adapter leaves the volume; the endpoint is deleted when no other deployment of its
    base model needs it, and the deployment is `deleted` once RunPod no longer lists it."""
    return deployments.delete(backend=backend, caller=caller, deployment_id=deployment_id)


@router.post("/{deployment_id}/chat/completions", responses=problem_responses(429))
async def chat(
    deployment_id: str, body: ChatIn, caller: RunManager, backend: BackendDep
) -> Response:
    """V2: an OpenAI chat completion (`stream` supported) answered by the deployment's adapter,
    proxied with the organization's RunPod key, which never leaves the server. A cold start
    answers once a worker is up, within SERVING_COLD_START_S, else 503 `serving-cold-start`
    with Retry-After. Past the organization's rate limit (SERVING_RATE_LIMIT) 429
    `chat-rate-limited` with Retry-After, nothing sent to RunPod; requests and tokens are
    counted per deployment (`usage`)."""
    upstream = body.upstream()
    if body.stream:
        status_code, chunks = await run_in_threadpool(
            deployments.chat_stream,
            backend=backend,
            caller=caller,
            deployment_id=deployment_id,
            body=upstream,
        )
        media = "text/event-stream" if status_code == 200 else "application/json"
        return StreamingResponse(chunks, status_code=status_code, media_type=media)
    code, headers, content = await run_in_threadpool(
        deployments.chat, backend=backend, caller=caller, deployment_id=deployment_id, body=upstream
    )
    return Response(content, status_code=code, headers=headers)
