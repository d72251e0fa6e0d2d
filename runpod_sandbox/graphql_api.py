"""POST /graphql: RunPod's GraphQL API over the sandbox model, executed with graphql-core."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from decimal import Decimal
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

from graphql import (
    GraphQLError,
    GraphQLSchema,
    OperationDefinitionNode,
    OperationType,
    build_schema,
    execute_sync,
    parse,
    validate,
)
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from . import seed, tenants
from .faults import SOMETHING_WENT_WRONG
from .model import CreatedThenFailed, Pod, SandboxError, SandboxModel, SandboxUnavailable
from .tenants import account_key

STOCK_RANK = {"High": 3, "Medium": 2, "Low": 1, "None": 0}


@lru_cache(maxsize=1)
def schema() -> GraphQLSchema:
    return build_schema((Path(__file__).with_name("schema.graphql")).read_text())


def key_role(request: Request) -> str | None:
    """'rw', 'ro' or None for the API key in the Bearer header or ?api_key= (docs style)."""
    header = request.headers.get("authorization", "")
    key = header[7:].strip() if header.lower().startswith("bearer ") else ""
    key = account_key(key or request.query_params.get("api_key", ""))
    if key == seed.API_KEY:
        return "rw"
    if key == seed.READ_ONLY_API_KEY:
        return "ro"
    return None


def _stock_or_null(stock: str) -> str | None:
    # "None" stock is served as JSON null (runpodctl treats empty as unavailable): inference.
    return None if stock == "None" else stock


def _fake_ip(pod: Pod, public: bool) -> str:
    n = int(hashlib.sha256(pod.id.encode()).hexdigest()[:4], 16)
    # TEST-NET-3 for public addresses, CGNAT range like RunPod's proxy addresses for private.
    return f"203.0.113.{n % 250 + 1}" if public else f"100.65.{n % 250}.{n // 250 % 250}"


def pod_view(model: SandboxModel, pod: Pod) -> dict[str, Any]:
    """A Pod as RunPod's GraphQL returns it: env as "K=V" strings, runtime null while starting."""
    runtime = None
    if model.runtime_ready(pod):
        ports = []
        for i, spec in enumerate(p for p in pod.ports.split(",") if p):
            private, _, kind = spec.partition("/")
            public = kind == "tcp"
            ports.append(
                {
                    "ip": _fake_ip(pod, public),
                    "isIpPublic": public,
                    "privatePort": int(private),
                    "publicPort": 10000
                    + int(hashlib.sha256(pod.id.encode()).hexdigest()[:3], 16)
                    + i
                    if public
                    else int(private),
                    "type": kind or "tcp",
                }
            )
        runtime = {
            "uptimeInSeconds": model.uptime_seconds(pod),
            "ports": ports,
            "gpus": [
                {"id": f"GPU-{pod.machine_id}-{i}", "gpuUtilPercent": 0, "memoryUtilPercent": 0}
                for i in range(pod.gpu_count)
            ],
            "container": {"cpuPercent": 0, "memoryPercent": 0},
        }
    dc = seed.DATACENTER_BY_ID.get(pod.datacenter_id)
    volume = model.volumes.get(pod.network_volume_id or "")
    return {
        "id": pod.id,
        "name": pod.name,
        "imageName": pod.image_name,
        "env": [f"{k}={v}" for k, v in pod.env.items()],
        "machineId": pod.machine_id,
        "machine": {
            "podHostId": pod.pod_host_id,
            "gpuDisplayName": pod.gpu_display_name,
            "gpuTypeId": pod.gpu_type_id,
            "dataCenterId": pod.datacenter_id,
            "location": dc.location if dc else None,
            "secureCloud": True,
        },
        "containerDiskInGb": pod.container_disk_gb,
        "costPerHr": float(pod.cost_per_hr),
        "adjustedCostPerHr": float(pod.cost_per_hr),
        "desiredStatus": pod.desired_status,
        "dockerArgs": pod.docker_args,
        "dockerId": None,
        "gpuCount": pod.gpu_count,
        "gpuTypeId": pod.gpu_type_id,
        "lastStatusChange": pod.last_status_change,
        "lastStartedAt": pod.last_started_at.isoformat().replace("+00:00", "Z")
        if pod.last_started_at
        else None,
        "memoryInGb": pod.memory_gb,
        "podType": "RESERVED",
        "port": None,
        "ports": pod.ports,
        "uptimeSeconds": model.uptime_seconds(pod),
        "vcpuCount": pod.vcpu_count,
        "volumeInGb": pod.volume_gb,
        "volumeMountPath": pod.volume_mount_path,
        "networkVolumeId": pod.network_volume_id,
        "networkVolume": _volume_view(volume) if volume else None,
        "dataCenterId": pod.datacenter_id,
        "allowedCudaVersions": pod.allowed_cuda_versions,
        "templateId": pod.template_id,
        "locked": False,
        "runtime": runtime,
    }


def _volume_view(v: Any) -> dict[str, Any]:
    return {"id": v.id, "name": v.name, "size": v.size_gb, "dataCenterId": v.datacenter_id}


def gpu_view(
    gpu: seed.GpuType,
    secure_price: Decimal | None = None,
    stock: dict[str, str] | None = None,
    hosts: Callable[[str], tuple[str, ...]] | None = None,
) -> dict[str, Any]:
    on_demand = gpu.secure_price if secure_price is None else secure_price
    stock = gpu.stock if stock is None else stock

    cuda_of = hosts or partial(seed.host_cuda_versions, gpu=gpu)

    def lowest_price(_info: Any, input: dict[str, Any] | None = None) -> dict[str, Any]:
        args = input or {}
        count = int(args.get("gpuCount") or 1)
        wanted = args.get("dataCenterId")
        cuda = {str(c) for c in args.get("allowedCudaVersions") or []}  # an exact-match set
        stocks = [
            s
            for dc, s in stock.items()
            if (not wanted or dc == wanted) and (not cuda or cuda & set(cuda_of(dc)))
        ]
        best = max(stocks, key=lambda s: STOCK_RANK[s], default="None")
        counts = seed.AVAILABLE_COUNTS[best]
        return {
            "gpuName": gpu.display_name,
            "gpuTypeId": gpu.id,
            "minimumBidPrice": float(gpu.secure_spot_price),
            "uninterruptablePrice": float(on_demand),
            "minMemory": 62 * count,
            "minVcpu": 8 * count,
            "stockStatus": _stock_or_null(best if count in counts else "None"),
            "availableGpuCounts": counts,
            "maxUnreservedGpuCount": max(counts, default=0),
            "countryCode": None,
        }

    price = float(on_demand)
    return {
        "id": gpu.id,
        "displayName": gpu.display_name,
        "manufacturer": gpu.manufacturer,
        "memoryInGb": gpu.memory_gb,
        "cudaCores": gpu.cuda_cores,
        "maxGpuCount": gpu.max_gpu_count,
        "secureCloud": True,
        "communityCloud": gpu.community_price is not None,
        "securePrice": price,
        "communityPrice": float(gpu.community_price) if gpu.community_price else None,
        # Commitment discounts are invented but fixed (inference).
        "oneWeekPrice": round(price * 0.95, 2),
        "oneMonthPrice": round(price * 0.9, 2),
        "threeMonthPrice": round(price * 0.85, 2),
        "sixMonthPrice": round(price * 0.8, 2),
        "communitySpotPrice": float(gpu.community_price * 7 / 10) if gpu.community_price else None,
        "secureSpotPrice": float(gpu.secure_spot_price),
        "lowestPrice": lowest_price,
    }


# RunPod's placeholder GPU type: listed, never placeable (seed.PLACEHOLDER_GPU_ID).
PLACEHOLDER_GPU: dict[str, Any] = {
    "id": seed.PLACEHOLDER_GPU_ID,
    "displayName": seed.PLACEHOLDER_GPU_ID,
    "manufacturer": None,
    "memoryInGb": 0,
    "secureCloud": True,
    "communityCloud": True,
    "securePrice": 0.0,
    "communityPrice": 0.0,
    "lowestPrice": None,
}


class Root:
    """Resolvers for Query and Mutation; graphql-core calls these with (info, **args)."""

    def __init__(self, model: SandboxModel) -> None:
        self.model = model

    def myself(self, _info: Any) -> dict[str, Any]:
        m = self.model

        def pods(_info: Any) -> list[dict[str, Any]]:  # resolved only when asked for
            with m.lock:
                return [pod_view(m, p) for p in m.account_pods()]

        with m.lock:
            return {
                "id": seed.ACCOUNT_ID,
                "email": seed.EMAIL,
                "pubKey": m.pub_key,
                "clientBalance": float(round(m.balance, 2)),
                "currentSpendPerHr": float(round(m.current_spend_per_hr(), 4)),
                "spendLimit": float(m.spend_limit),
                "notifyPodsStale": True,
                "notifyPodsGeneral": True,
                "notifyLowBalance": True,
                "networkVolumes": [
                    _volume_view(v) for v in m.volumes.values() if v.tenant == tenants.current.get()
                ],
                "pods": pods,
                "endpoints": [],
            }

    def gpuTypes(self, _info: Any, input: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        ids = None
        if input and input.get("id"):
            ids = {input["id"]}
        elif input and input.get("ids"):
            ids = set(input["ids"])
        views = [
            gpu_view(
                g, self.model.price(g), self.model.stock(g), partial(self.model.host_cuda, gpu=g)
            )
            for g in seed.GPU_TYPES
            if ids is None or g.id in ids
        ]
        if ids is None:
            views.append(PLACEHOLDER_GPU)
        return views

    def pod(self, _info: Any, input: dict[str, Any] | None = None) -> dict[str, Any] | None:
        m = self.model
        with m.lock:
            found = m.find_pod((input or {}).get("podId", ""))
            return pod_view(m, found) if found else None

    def dataCenters(self, _info: Any) -> list[dict[str, Any]]:
        return [
            {
                "id": dc.id,
                "name": dc.name,
                "location": dc.location,
                "s3Api": dc.s3_api,
                "gpuAvailability": [
                    {
                        "gpuTypeId": g.id,
                        "displayName": g.display_name,
                        "stockStatus": _stock_or_null(self.model.stock(g)[dc.id]),
                        "available": self.model.stock(g)[dc.id] != "None",
                    }
                    for g in seed.GPU_TYPES
                    if dc.id in g.stock
                ],
            }
            for dc in seed.DATACENTERS
        ]

    def _create(self, input: dict[str, Any]) -> dict[str, Any]:
        pod = self.model.create_pod(input)
        with self.model.lock:
            return pod_view(self.model, pod)

    def podFindAndDeployOnDemand(self, _info: Any, input: dict[str, Any]) -> dict[str, Any]:
        if not input.get("gpuTypeId"):
            raise SandboxError("gpuTypeId is required.")
        return self._create(input)

    def deployCpuPod(self, _info: Any, input: dict[str, Any]) -> dict[str, Any]:
        return self._create({**input, "gpuTypeId": None})

    def saveRegistryAuth(self, _info: Any, input: dict[str, Any]) -> dict[str, Any]:
        return self.model.save_registry(
            str(input.get("name") or ""),
            str(input.get("username") or ""),
            str(input.get("password") or ""),
        )

    def deleteRegistryAuth(self, _info: Any, registryAuthId: str) -> None:
        if not self.model.delete_registry(registryAuthId):
            raise SandboxError("Container registry auth not found.")

    def podStop(self, _info: Any, input: dict[str, Any]) -> dict[str, Any]:
        pod = self.model.stop_pod(input["podId"])
        with self.model.lock:
            return pod_view(self.model, pod)

    def podResume(self, _info: Any, input: dict[str, Any]) -> dict[str, Any]:
        pod = self.model.resume_pod(input["podId"], input.get("gpuCount"))
        with self.model.lock:
            return pod_view(self.model, pod)

    def podTerminate(self, _info: Any, input: dict[str, Any]) -> None:
        self.model.terminate_pod(input["podId"])

    def updateUserSettings(self, info: Any, input: dict[str, Any]) -> dict[str, Any]:
        if input.get("pubKey") is not None:
            with self.model.lock:
                self.model.pub_key = input["pubKey"]
        return self.myself(info)

    def saveTemplate(self, _info: Any, input: dict[str, Any]) -> dict[str, Any]:
        template = {
            "id": hashlib.sha256(json.dumps(input, sort_keys=True).encode()).hexdigest()[:10],
            "name": input.get("name"),
            "imageName": input.get("imageName"),
            "dockerArgs": input.get("dockerArgs", ""),
            "containerDiskInGb": input.get("containerDiskInGb"),
            "volumeInGb": input.get("volumeInGb"),
            "volumeMountPath": input.get("volumeMountPath"),
            "ports": input.get("ports"),
            "env": list(input.get("env") or []),
            "isServerless": bool(input.get("isServerless")),
        }
        with self.model.lock:
            self.model.templates.append(template)
        return template


def _errors(*messages: str) -> dict[str, Any]:
    return {"errors": [{"message": m} for m in messages]}


def run_query(model: SandboxModel, query: str, role: str) -> tuple[int, dict[str, Any]]:
    """Parse, validate, authorise and execute; returns (HTTP status, JSON body)."""
    try:
        document = parse(query)
    except GraphQLError as exc:
        return 400, {"errors": [exc.formatted]}
    problems = validate(schema(), document)
    if problems:
        return 400, {"errors": [p.formatted for p in problems]}
    is_mutation = any(
        isinstance(d, OperationDefinitionNode) and d.operation == OperationType.MUTATION
        for d in document.definitions
    )
    if is_mutation and role != "rw":
        # A valid but under-privileged key: HTTP 200 + errors (as RunPod answers a read-only key).
        return 200, _errors("Unauthorized")
    result = execute_sync(schema(), document, root_value=Root(model))
    if result.errors:
        for err in result.errors:
            if isinstance(err.original_error, (CreatedThenFailed, SandboxUnavailable)):
                return 500, _errors(SOMETHING_WENT_WRONG)
        body: dict[str, Any] = {
            "errors": [{"message": e.message, "path": e.path} for e in result.errors]
        }
        body["data"] = result.data
        return 200, body
    return 200, {"data": result.data}


async def graphql_endpoint(request: Request) -> Response:
    model: SandboxModel = request.app.state.model
    role = key_role(request)
    if role is None:
        return JSONResponse(_errors("Unauthorized"), status_code=401)
    try:
        payload = json.loads(await request.body())
        query = payload["query"]
        if not isinstance(query, str):
            raise TypeError("query must be a string")
    except (ValueError, KeyError, TypeError):
        return JSONResponse(_errors("Must provide query string."), status_code=400)
    status, body = await run_in_threadpool(run_query, model, query, role)
    return JSONResponse(body, status_code=status)
