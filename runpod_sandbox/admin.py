"""/_sandbox/*: the knobs tests and the demo turn (no auth: the sandbox listens on loopback)."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from .billing_api import iso, ledger_endpoint
from .model import RUNNING, CreatedThenFailed, Pod, SandboxError, SandboxModel


async def _json(request: Request) -> dict[str, Any]:
    raw = await request.body()
    data = json.loads(raw) if raw.strip() else {}
    if not isinstance(data, dict):
        raise ValueError("body must be a JSON object")
    return data


def _bad(detail: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status)


def pod_record(model: SandboxModel, pod: Pod) -> dict[str, Any]:
    """Everything the sandbox knows about a Pod, for /_sandbox/pods."""
    return {
        "id": pod.id,
        "name": pod.name,
        "status": pod.desired_status,
        "image_name": pod.image_name,
        "start_command": pod.docker_args,  # the create's dockerArgs / args
        "gpu_type_id": pod.gpu_type_id,
        "gpu_count": pod.gpu_count,
        "datacenter_id": pod.datacenter_id,
        "network_volume_id": pod.network_volume_id,
        "cost_per_hr": str(pod.cost_per_hr),
        "created_at": iso(pod.created_at),
        "terminated_at": iso(pod.terminated_at) if pod.terminated_at else None,
        "end_reason": pod.end_reason,
        "scenario": pod.scenario,
        "runtime_ready": model.runtime_ready(pod),
        "env": dict(pod.env),
        "files": sorted(pod.files),
        "container_alive": pod.container_alive,  # a real trainer process still runs
        "container_pid": pod.container_pid,
        "cuda_version": pod.cuda_version,
        "min_cuda_version": pod.min_cuda_version,
        "allowed_cuda_versions": list(pod.allowed_cuda_versions),
        "stop_after": iso(pod.stop_after) if pod.stop_after else None,
        "terminate_after": iso(pod.terminate_after) if pod.terminate_after else None,
        "registry_auth_id": pod.registry_auth_id,
        "last_status_change": pod.last_status_change,
    }


async def scenario(request: Request) -> Response:
    try:
        body = await _json(request)
        name, count = body.get("scenario", "success"), int(body.get("count", 1))
        request.app.state.model.set_scenario(name, count)
    except (ValueError, TypeError) as exc:
        return _bad(str(exc))
    return JSONResponse({"scenario": name, "count": count})


async def faults(request: Request) -> Response:
    model: SandboxModel = request.app.state.model
    if request.method == "GET":
        return JSONResponse(model.faults.to_json())
    try:
        parsed = await run_in_threadpool(model.set_faults, await _json(request))
    except SandboxError as exc:
        return _bad(str(exc), 404)
    except (ValueError, TypeError) as exc:
        return _bad(str(exc))
    return JSONResponse(parsed.to_json())


async def clock(request: Request) -> Response:
    model: SandboxModel = request.app.state.model
    if request.method == "POST":
        try:
            body = await _json(request)
            if body.get("freeze") is True:
                model.clock.freeze()
            elif body.get("freeze") is False:
                model.clock.unfreeze()
            await run_in_threadpool(model.advance_clock, float(body.get("advance_seconds", 0)))
        except (ValueError, TypeError) as exc:
            return _bad(str(exc))
    return JSONResponse({"now": iso(model.clock.now()), "frozen": model.clock.frozen})


async def pods(request: Request) -> Response:
    model: SandboxModel = request.app.state.model
    if request.method == "GET":
        with model.lock:
            return JSONResponse({"pods": [pod_record(model, p) for p in model.all_pods()]})
    try:
        body = await _json(request)
    except ValueError as exc:
        return _bad(str(exc))
    # Snake-case or RunPod's camelCase: both are accepted to make orphans easily.
    names = {
        "image_name": "imageName",
        "gpu_type_id": "gpuTypeId",
        "gpu_count": "gpuCount",
        "datacenter_id": "dataCenterId",
        "network_volume_id": "networkVolumeId",
        "container_disk_in_gb": "containerDiskInGb",
        "volume_in_gb": "volumeInGb",
    }
    spec = {names.get(k, k): v for k, v in body.items()}
    if isinstance(spec.get("env"), dict):
        spec["env"] = [{"key": k, "value": v} for k, v in spec["env"].items()]
    spec.setdefault("name", "console-pod")
    spec.setdefault("imageName", "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04")
    spec.setdefault("gpuTypeId", "NVIDIA GeForce RTX 4090")
    spec.setdefault("containerDiskInGb", 10)
    try:
        pod = await run_in_threadpool(model.create_pod, spec)
    except CreatedThenFailed as exc:
        pod = model.pods[exc.pod_id]
    except SandboxError as exc:
        return _bad(str(exc), 409)
    with model.lock:
        return JSONResponse(pod_record(model, pod), status_code=201)


async def pod_terminate(request: Request) -> Response:
    model: SandboxModel = request.app.state.model
    try:
        await run_in_threadpool(model.console_terminate, request.path_params["pod_id"])
    except SandboxError as exc:
        return _bad(str(exc), 404)
    return JSONResponse({"id": request.path_params["pod_id"], "status": "TERMINATED"})


async def pod_vanish(request: Request) -> Response:
    model: SandboxModel = request.app.state.model
    try:
        await run_in_threadpool(model.vanish_pod, request.path_params["pod_id"])
    except SandboxError as exc:
        return _bad(str(exc), 404)
    return JSONResponse({"id": request.path_params["pod_id"], "status": "TERMINATED"})


async def pod_file(request: Request) -> Response:
    """A Pod-local file, as a user would fetch it over SSH: only while the Pod runs."""
    model: SandboxModel = request.app.state.model
    pod_id, path = request.path_params["pod_id"], request.path_params["path"].lstrip("/")
    with model.lock:
        pod = model.find_pod(pod_id)
        if pod is None:
            return _bad("pod not found", 404)
        if pod.desired_status != RUNNING:
            return _bad(f"pod is {pod.desired_status}; resume it to read its files", 409)
        local = model.pod_file(pod, path)
        data = local.read_bytes() if local is not None and local.is_file() else pod.files.get(path)
    if data is None:
        return _bad("no such file", 404)
    return Response(data, media_type="application/octet-stream")


async def balance(request: Request) -> Response:
    model: SandboxModel = request.app.state.model
    if request.method == "POST":
        try:
            body = await _json(request)
            if "set" in body:
                model.set_balance(Decimal(str(body["set"])))
            if "add" in body:
                model.add_credit(Decimal(str(body["add"])))
        except (ValueError, ArithmeticError) as exc:
            return _bad(str(exc))
    model.settle()
    return JSONResponse({"balance": str(model.balance)})


async def prices(request: Request) -> Response:
    """`{gpu_type_id: price | null}` moves (or restores) on-demand prices, as RunPod's do."""
    model: SandboxModel = request.app.state.model
    if request.method == "POST":
        try:
            for gpu_type_id, price in (await _json(request)).items():
                model.set_price(str(gpu_type_id), None if price is None else Decimal(str(price)))
        except (ValueError, ArithmeticError, AttributeError) as exc:
            return _bad(str(exc))
    return JSONResponse({k: str(v) for k, v in model.price_overrides.items()})


async def held(request: Request) -> Response:
    """Creates whose Pod (or endpoint) exists but whose answer waits (`hold_creates`)."""
    model: SandboxModel = request.app.state.model
    return JSONResponse(
        {
            "held": [
                {"pod_id": h.pod_id, "name": h.name, "since": iso(h.since)}
                for h in model.held_creates()
            ]
        }
    )


async def release_held(request: Request) -> Response:
    """`{"fail": true}` makes the held creates answer HTTP 500, as `create_then_500` does."""
    model: SandboxModel = request.app.state.model
    try:
        fail = bool((await _json(request)).get("fail", False))
    except ValueError as exc:
        return _bad(str(exc))
    return JSONResponse({"released": model.release_held(fail)})


async def stock(request: Request) -> Response:
    """`{gpu_type_id: level | null}` moves (or restores) a GPU's stock in all its datacenters:
    a GPU saved in a draft can be gone by launch time."""
    model: SandboxModel = request.app.state.model
    if request.method == "POST":
        try:
            for gpu_type_id, level in (await _json(request)).items():
                model.set_stock(str(gpu_type_id), None if level is None else str(level))
        except (ValueError, AttributeError) as exc:
            return _bad(str(exc))
    return JSONResponse(dict(model.stock_overrides))


async def cuda(request: Request) -> Response:
    """`{gpu_type_id, datacenter_id, versions: [..] | null}` sets (or restores) the CUDA
    versions of a GPU type's hosts in one datacenter."""
    model: SandboxModel = request.app.state.model
    if request.method == "POST":
        try:
            body = await _json(request)
            versions = body.get("versions")
            model.set_host_cuda(
                str(body.get("gpu_type_id")),
                str(body.get("datacenter_id")),
                None if versions is None else list(versions),
            )
        except (ValueError, TypeError) as exc:
            return _bad(str(exc))
    overrides = [
        {"gpu_type_id": g, "datacenter_id": dc, "versions": list(v)}
        for (g, dc), v in model.host_cuda_overrides.items()
    ]
    return JSONResponse({"overrides": overrides})


async def credentials(request: Request) -> Response:
    return JSONResponse(request.app.state.credentials)


routes = [
    Route("/_sandbox/scenario", scenario, methods=["POST"]),
    Route("/_sandbox/faults", faults, methods=["GET", "POST"]),
    Route("/_sandbox/clock", clock, methods=["GET", "POST"]),
    Route("/_sandbox/pods", pods, methods=["GET", "POST"]),
    Route("/_sandbox/pods/{pod_id}/terminate", pod_terminate, methods=["POST"]),
    Route("/_sandbox/pods/{pod_id}/vanish", pod_vanish, methods=["POST"]),
    Route("/_sandbox/pods/{pod_id}/files/{path:path}", pod_file, methods=["GET"]),
    Route("/_sandbox/ledger", ledger_endpoint, methods=["GET"]),
    Route("/_sandbox/balance", balance, methods=["GET", "POST"]),
    Route("/_sandbox/prices", prices, methods=["GET", "POST"]),
    Route("/_sandbox/stock", stock, methods=["GET", "POST"]),
    Route("/_sandbox/cuda", cuda, methods=["GET", "POST"]),
    Route("/_sandbox/credentials", credentials, methods=["GET"]),
    Route("/_sandbox/held", held, methods=["GET"]),
    Route("/_sandbox/held/release", release_held, methods=["POST"]),
]
