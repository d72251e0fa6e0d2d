"""REST v2 shapes of the sandbox model: Pod, NetworkVolume, problem+json, auth (REST v2 spec)."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from . import seed
from .billing_api import iso
from .model import EXITED, RUNNING, TERMINATED, NetworkVolume, Pod, SandboxModel
from .tenants import account_key

PROVISIONING, STARTING, ERROR = "PROVISIONING", "STARTING", "ERROR"
SSH_PROXY_HOST = "ssh.runpod.io"
ACTIONS = {
    RUNNING: ["stop", "restart", "terminate"],
    PROVISIONING: ["stop", "terminate"],
    STARTING: ["stop", "terminate"],
    EXITED: ["start", "terminate"],
    ERROR: ["start", "terminate"],
}


def problem(status: int, title: str, detail: str, errors: list[str] | None = None) -> Response:
    body: dict[str, Any] = {"title": title, "status": status, "detail": detail}
    if errors:
        body["errors"] = errors
    return Response(json.dumps(body), status_code=status, media_type="application/problem+json")


def not_found(detail: str = "resource not found") -> Response:
    return problem(404, "Not Found", detail)


def bad_request(detail: str) -> Response:
    return problem(400, "Bad Request", detail)


def unprocessable(*errors: str) -> Response:
    return problem(422, "Unprocessable Entity", "Request validation failed.", list(errors))


def key_role(request: Request) -> str | None:
    """'rw', 'ro' or None; REST v2 takes the Bearer header only."""
    header = request.headers.get("authorization", "")
    key = header[7:].strip() if header.lower().startswith("bearer ") else ""
    return {seed.API_KEY: "rw", seed.READ_ONLY_API_KEY: "ro"}.get(account_key(key))


def unauthorized() -> Response:
    return problem(401, "Unauthorized", "missing or invalid bearer token")


def forbidden() -> Response:
    return problem(403, "Forbidden", "access denied")


async def json_body(request: Request) -> Any:
    raw = await request.body()
    return json.loads(raw) if raw.strip() else None


def ok(body: Any, status: int = 200) -> Response:
    return JSONResponse(body, status_code=status)


def v2_status(model: SandboxModel, pod: Pod) -> str:
    """The model's status in v2 words; PROVISIONING then STARTING until the runtime is up.

    A status the model holds that GraphQL knows but v2 does not (e.g. a test's "DEAD") is passed
    through unchanged, as an enum RunPod extends would arrive (inference).
    """
    if pod.desired_status != RUNNING:
        return pod.desired_status
    if model.runtime_ready(pod):
        return RUNNING
    if pod.last_started_at == pod.created_at and pod.runtime_ready_at is not None:
        half = pod.created_at + (pod.runtime_ready_at - pod.created_at) / 2
        if model.clock.now() < half:
            return PROVISIONING
    return STARTING


def _ts(t: datetime | None) -> str | None:
    return iso(t) if t else None


def _ports(pod: Pod) -> list[str]:
    return [p for p in pod.ports.split(",") if p]


def _ssh(model: SandboxModel, pod: Pod) -> dict[str, Any]:
    # Basic SSH's username is the podHostId (RunPod's SSH docs; the v2 field: inference).
    proxy = {
        "host": SSH_PROXY_HOST,
        "port": 22,
        "username": pod.pod_host_id,
        "command": f"ssh {pod.pod_host_id}@{SSH_PROXY_HOST}",
    }
    direct = None
    if model.runtime_ready(pod) and "22/tcp" in _ports(pod):
        n = int(hashlib.sha256(pod.id.encode()).hexdigest()[:4], 16)
        ip, port = f"203.0.113.{n % 250 + 1}", 10000 + n % 5000
        direct = {
            "host": ip,
            "port": port,
            "username": "root",
            "command": f"ssh root@{ip} -p {port}",
        }
    return {"proxy": proxy, "direct": direct}


def _runtime(model: SandboxModel, pod: Pod) -> dict[str, Any] | None:
    if not model.runtime_ready(pod):
        return None
    return {
        "uptime": model.uptime_seconds(pod),
        "gpus": [{"util": 0, "memoryUtil": 0} for _ in range(pod.gpu_count)],
        "cpu": {"util": 0},
        "memory": {"util": 0},
        "ports": [
            {
                "private": int(p.partition("/")[0]),
                "public": int(p.partition("/")[0]),
                "type": p.partition("/")[2] or "tcp",
                "ip": "100.65.0.1",
            }
            for p in _ports(pod)
        ],
    }


def _mounts(pod: Pod) -> dict[str, Any]:
    if pod.network_volume_id:
        return {"network": [{"volumeId": pod.network_volume_id, "path": pod.volume_mount_path}]}
    if pod.volume_gb:
        return {"persistent": {"size": pod.volume_gb, "path": pod.volume_mount_path}}
    return {}


def pod_view(model: SandboxModel, pod: Pod) -> dict[str, Any]:
    """A Pod as REST v2 returns it (schema Pod): cost 0.0 when EXITED or TERMINATED."""
    status = v2_status(model, pod)
    cost = 0.0 if status in (EXITED, TERMINATED) else float(pod.cost_per_hr)
    view: dict[str, Any] = {
        "id": pod.id,
        "name": pod.name,
        "status": status,
        "actions": ACTIONS.get(status, []),
        "image": pod.image_name,
        "args": pod.docker_args,
        "disk": pod.container_disk_gb,
        "mounts": _mounts(pod),
        "ports": _ports(pod),
        "env": dict(pod.env),
        "registry": pod.registry_auth_id,
        "cloud": "COMMUNITY" if pod.cloud_type == "COMMUNITY" else "SECURE",
        "dataCenterId": pod.datacenter_id,
        "cudaVersion": pod.cuda_version,
        "ssh": _ssh(model, pod),
        "template": None,
        "cost": cost,
        "locked": False,
        "runtime": _runtime(model, pod),
        "createdAt": iso(pod.created_at),
        "startedAt": _ts(pod.last_started_at) if status != EXITED else None,
        "globalNetworking": {"enabled": False},
    }
    if pod.gpu_type_id:
        view["gpu"] = {
            "id": pod.gpu_type_id,
            "count": pod.gpu_count,
            "vcpuCount": pod.vcpu_count,
            "memory": pod.memory_gb,
        }
    else:
        view["cpu"] = {"id": "cpu3c", "vcpuCount": pod.vcpu_count, "memory": pod.memory_gb}
    return view


def volume_view(volume: NetworkVolume) -> dict[str, Any]:
    return {
        "id": volume.id,
        "name": volume.name,
        "size": volume.size_gb,
        "dataCenter": volume.datacenter_id,
        "type": "STANDARD",
    }
