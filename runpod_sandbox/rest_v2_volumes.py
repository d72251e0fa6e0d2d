"""REST v2 network volumes (/v2/network-volumes*) and the GPU catalog (/v2/catalog/gpus).

Volumes: RunPod's REST v2 spec. The catalog follows runpod/docs api-reference-v2/openapi.json
(schema GpuType, params include=AVAILABILITY, product, count, cloud); the list's wrapper key
`gpus` is inference from v2's wrapped lists (`{"pods": [...]}`, `{"networkVolumes": [...]}`).
"""

from __future__ import annotations

import re
import secrets
import string
from collections.abc import Callable
from decimal import Decimal
from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from . import rest_v2_views as v
from . import seed, tenants
from .model import TERMINATED, NetworkVolume, SandboxError, SandboxModel

LEVEL = {"High": "HIGH", "Medium": "MEDIUM", "Low": "LOW", "None": "NONE"}
RANK = ["NONE", "LOW", "MEDIUM", "HIGH"]
CUDA_VERSION = re.compile(r"\d+\.\d+")


def _model(request: Request) -> SandboxModel:
    model: SandboxModel = request.app.state.model
    return model


def _size_error(size: Any) -> str | None:
    if not isinstance(size, int) or isinstance(size, bool) or not 10 <= size <= 4096:
        return "$.size: an integer GB between 10 and 4096"
    return None


async def volumes(request: Request) -> Response:  # noqa: PLR0911 - one answer per rule
    model, role = _model(request), v.key_role(request)
    if role is None:
        return v.unauthorized()
    if request.method == "GET":
        with model.lock:
            model.settle()
            mine = [x for x in model.volumes.values() if x.tenant == tenants.current.get()]
            return v.ok({"networkVolumes": [v.volume_view(x) for x in mine]})
    if role != "rw":
        return v.forbidden()
    try:
        body = await v.json_body(request)
    except ValueError:
        return v.unprocessable("$: body is not JSON")
    if not isinstance(body, dict):
        return v.unprocessable("$: expected an object")
    allowed = {"name", "size", "dataCenter", "type"}
    errors = [f"$: additional properties '{k}' not allowed" for k in body if k not in allowed]
    if not isinstance(body.get("name"), str) or not body["name"]:
        errors.append("$.name: required, minLength 1")
    size_error = _size_error(body.get("size"))
    if size_error:
        errors.append(size_error)
    if body.get("type", "STANDARD") not in ("STANDARD", "HIGH_PERFORMANCE"):
        errors.append("$.type: STANDARD or HIGH_PERFORMANCE")
    if errors:
        return v.unprocessable(*errors)
    if body.get("dataCenter") not in seed.DATACENTER_BY_ID:
        return v.bad_request(f"unknown data center {body.get('dataCenter')!r}")
    alphabet = string.ascii_lowercase + string.digits
    with model.lock:
        now = model.settle()
        volume = NetworkVolume(
            "".join(secrets.choice(alphabet) for _ in range(10)),
            body["name"],
            body["size"],
            body["dataCenter"],
            now,
            tenant=tenants.current.get(),
        )
        model.volumes[volume.id] = volume  # billable from now (hourly, as it completes)
        return v.ok(v.volume_view(volume), 201)


def _mine(model: SandboxModel, volume_id: str) -> NetworkVolume | None:
    """The volume, unless another user (tenant) made it: RunPod says it is not there."""
    found = model.volumes.get(volume_id)
    return found if found is not None and found.tenant == tenants.current.get() else None


async def volume(request: Request) -> Response:  # noqa: PLR0911 - one answer per rule
    model, role = _model(request), v.key_role(request)
    if role is None:
        return v.unauthorized()
    volume_id = request.path_params["volume_id"]
    if request.method != "GET" and role != "rw":
        return v.forbidden()
    body: Any = None
    if request.method == "PATCH":
        try:
            body = await v.json_body(request)
        except ValueError:
            return v.unprocessable("$: body is not JSON")
        if not isinstance(body, dict) or not body:
            return v.unprocessable("$: at least one of name, size")
        errors = [
            f"$: additional properties '{k}' not allowed" for k in body if k not in ("name", "size")
        ]
        if "size" in body and _size_error(body["size"]):
            errors.append(str(_size_error(body["size"])))
        if errors:
            return v.unprocessable(*errors)
    with model.lock:
        model.settle()
        found = _mine(model, volume_id)
        if found is None:
            return v.not_found("network volume not found")
        if request.method == "GET":
            return v.ok(v.volume_view(found))
        if request.method == "DELETE":
            if any(
                p.network_volume_id == volume_id and p.desired_status != TERMINATED
                for p in model.pods.values()
            ):
                # The spec names no status for this; RunPod's console refuses it (inference).
                return v.bad_request("the network volume is attached to a pod")
            del model.volumes[volume_id]
            return Response(status_code=204)
        if "size" in body and body["size"] < found.size_gb:
            return v.bad_request(f"size must not be smaller than the current {found.size_gb} GB")
        found.size_gb = int(body.get("size", found.size_gb))
        found.name = str(body.get("name", found.name))
        return v.ok(v.volume_view(found))


def _gpu_type(
    gpu: seed.GpuType,
    count: int | None,
    price: Decimal,
    stock: dict[str, str],
    min_cuda: str | None = None,
    host_cuda: Callable[[str], tuple[str, ...]] | None = None,
) -> dict[str, Any]:
    """One catalog entry; with `min_cuda` only hosts on that CUDA version or newer count
    (`minCudaVersion`, RUNPOD_FACTS appendix B), so a datacenter without one is not offered."""
    cuda_of = host_cuda or partial(seed.host_cuda_versions, gpu=gpu)
    if min_cuda is not None:
        stock = {
            dc: level
            for dc, level in stock.items()
            if any(seed.cuda_at_least(c, min_cuda) for c in cuda_of(dc))
        }
    view: dict[str, Any] = {
        "id": gpu.id,
        "name": gpu.display_name,
        "pool": None,
        "manufacturer": "NVIDIA" if gpu.manufacturer.lower() == "nvidia" else "UNKNOWN",
        "memory": gpu.memory_gb,
        "secure": True,
        "community": gpu.community_price is not None,
        "price": {"secure": float(price), "community": float(gpu.community_price or 0)},
        "maxCount": {"secure": gpu.max_gpu_count, "community": gpu.max_gpu_count},
    }
    if count is None:
        return view
    offered = [
        {
            "id": dc,
            "name": seed.DATACENTER_BY_ID[dc].name,
            "availability": LEVEL[level] if count in seed.AVAILABLE_COUNTS[level] else "NONE",
        }
        for dc, level in stock.items()
    ]
    offered = [d for d in offered if d["availability"] != "NONE"]
    view["availability"] = max((d["availability"] for d in offered), key=RANK.index, default="NONE")
    if offered:  # omitted entirely when the configuration is unavailable everywhere
        view["dataCenters"] = offered
    hosts = {
        c
        for d in offered
        for c in cuda_of(d["id"])
        if min_cuda is None or seed.cuda_at_least(c, min_cuda)
    }
    view["cudaVersions"] = [
        {"version": c, "availability": view["availability"]}
        for c in sorted(hosts, key=lambda c: tuple(int(p) for p in c.split(".")))
    ]
    return view


# RunPod's placeholder GPU type (seed.PLACEHOLDER_GPU_ID): listed, never placeable.
PLACEHOLDER_GPU: dict[str, Any] = {
    "id": seed.PLACEHOLDER_GPU_ID,
    "name": seed.PLACEHOLDER_GPU_ID,
    "pool": None,
    "manufacturer": "UNKNOWN",
    "memory": 0,
    "secure": True,
    "community": True,
    "price": {"secure": 0.0, "community": 0.0},
    "maxCount": {"secure": 0, "community": 0},
}


async def catalog_gpus(request: Request) -> Response:  # noqa: PLR0911 - one answer per rule
    if v.key_role(request) is None:
        return v.unauthorized()
    q = request.query_params
    include, product = q.get("include"), q.get("product")
    if (include == "AVAILABILITY") != bool(product):
        return v.bad_request("product is required with include=AVAILABILITY, and only with it")
    if include not in (None, "AVAILABILITY"):
        return v.unprocessable("$.include: AVAILABILITY")
    count: int | None = None
    if include:
        try:
            count = int(q.get("count", 1))
        except ValueError:
            return v.unprocessable("$.count: an integer >= 1")
        if count < 1:
            return v.unprocessable("$.count: an integer >= 1")
    min_cuda = q.get("minCudaVersion")
    if min_cuda is not None and not CUDA_VERSION.fullmatch(min_cuda):
        return v.unprocessable("$.minCudaVersion: ^\\d+\\.\\d+$")
    model = request.app.state.model
    gpus = [
        _gpu_type(
            g, count, model.price(g), model.stock(g), min_cuda, partial(model.host_cuda, gpu=g)
        )
        for g in seed.GPU_TYPES
    ]
    return v.ok({"gpus": [*gpus, PLACEHOLDER_GPU]})


async def registries(request: Request) -> Response:  # noqa: PLR0911 - one answer per rule
    """`/v2/registries` (v1's /containerregistryauth): {name, username, password}; the
    secrets are write-only (RUNPOD_FACTS appendix B)."""
    model, role = _model(request), v.key_role(request)
    if role is None:
        return v.unauthorized()
    if request.method == "GET":
        return v.ok({"registries": model.registry_views()})
    if role != "rw":
        return v.forbidden()
    try:
        body = await v.json_body(request)
    except ValueError:
        return v.unprocessable("$: body is not JSON")
    fields = ("name", "username", "password")
    if not isinstance(body, dict) or any(
        not isinstance(body.get(k), str) or not body[k] for k in fields
    ):
        return v.unprocessable("$: name, username and password are required strings")
    extra = [f"$: additional properties '{k}' not allowed" for k in body if k not in fields]
    if extra:
        return v.unprocessable(*extra)
    try:
        saved = model.save_registry(body["name"], body["username"], body["password"])
    except SandboxError as exc:
        return v.bad_request(str(exc))
    return v.ok(saved, 201)


async def registry(request: Request) -> Response:
    model, role = _model(request), v.key_role(request)
    if role is None:
        return v.unauthorized()
    reg_id = request.path_params["registry_id"]
    if request.method == "GET":
        found = [r for r in model.registry_views() if r["id"] == reg_id]
        return v.ok(found[0]) if found else v.not_found("registry not found")
    if role != "rw":
        return v.forbidden()
    if not model.delete_registry(reg_id):
        return v.not_found("registry not found")
    return Response(status_code=204)


routes = [
    Route("/v2/registries", registries, methods=["GET", "POST"]),
    Route("/v2/registries/{registry_id}", registry, methods=["GET", "DELETE"]),
    Route("/v2/network-volumes", volumes, methods=["GET", "POST"]),
    Route("/v2/network-volumes/{volume_id}", volume, methods=["GET", "PATCH", "DELETE"]),
    Route("/v2/catalog/gpus", catalog_gpus, methods=["GET"]),
]
