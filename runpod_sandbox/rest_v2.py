"""REST v2 Pods (/v2/pods*) over the same model as GraphQL (RunPod's REST v2 OpenAPI spec)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from . import rest_v2_views as v
from .billing_api import iso, parse_time
from .faults import NO_INSTANCES, NOT_ENOUGH_GPUS
from .model import CreatedThenFailed, SandboxError, SandboxModel, SandboxUnavailable

CREATE_FIELDS = {
    "name",
    "image",
    "args",
    "disk",
    "ports",
    "env",
    "registry",
    "cloud",
    "dataCenterIds",
    "globalNetworking",
    "startSsh",
    "startJupyter",
    "templateId",
    "gpu",
    "cpu",
    "mounts",
    "locked",
    "interruptible",
}
PATCH_FIELDS = {
    "name",
    "image",
    "args",
    "disk",
    "ports",
    "env",
    "registry",
    "mounts",
    "locked",
    "globalNetworking",
    "templateId",
}
CAPACITY = (NO_INSTANCES, NOT_ENOUGH_GPUS)
CUDA_VERSION = re.compile(r"\d+\.\d+")


def _model(request: Request) -> SandboxModel:
    model: SandboxModel = request.app.state.model
    return model


def refusal(exc: SandboxError) -> Response:
    """A model refusal in v2 words: capacity is a 400 with a detail, money a 402."""
    text = str(exc)
    if isinstance(exc, (CreatedThenFailed, SandboxUnavailable)):
        return v.problem(500, "Internal Server Error", "Something went wrong.")
    if "balance is too low" in text:
        return v.problem(402, "Payment Required", text)
    if text == "Pod not found.":
        return v.not_found("pod not found")
    return v.bad_request(text)


def _create_errors(body: Any) -> list[str]:
    if not isinstance(body, dict):
        return ["$: expected an object"]
    errors = [f"$: additional properties '{k}' not allowed" for k in body if k not in CREATE_FIELDS]
    if not isinstance(body.get("name"), str) or not body["name"]:
        errors.append("$.name: required, minLength 1")
    if not body.get("image") and not body.get("templateId"):
        errors.append("$.image: required unless templateId is set")
    if ("gpu" in body) == ("cpu" in body):
        errors.append("$: exactly one of gpu or cpu is required")
    gpu = body.get("gpu")
    if gpu is not None and (
        not isinstance(gpu, dict) or not gpu.get("id") or int(gpu.get("count", 1)) < 1
    ):
        errors.append("$.gpu: id required, count >= 1")
    cuda = [gpu.get("minCudaVersion")] if isinstance(gpu, dict) else []
    cuda += list(gpu.get("allowedCudaVersions") or []) if isinstance(gpu, dict) else []
    if any(c is not None and not CUDA_VERSION.fullmatch(str(c)) for c in cuda):
        errors.append("$.gpu: CUDA versions must match ^\\d+\\.\\d+$")
    if not isinstance(body.get("env", {}), dict):
        errors.append("$.env: expected an object of strings")
    network = (body.get("mounts") or {}).get("network")
    if network is not None and (
        not isinstance(network, list)
        or len(network) > 1
        or any(not m.get("volumeId") or not m.get("path") for m in network)
    ):
        errors.append("$.mounts.network: at most one {volumeId, path}")
    return errors


def _spec(body: dict[str, Any], datacenter: str | None) -> dict[str, Any]:
    """The REST body in the model's (GraphQL input) words."""
    gpu = body.get("gpu") or {}
    mounts = body.get("mounts") or {}
    network = (mounts.get("network") or [None])[0]
    persistent = mounts.get("persistent") or {}
    return {
        "name": body["name"],
        "imageName": body.get("image") or "",
        "gpuTypeId": gpu.get("id"),
        "gpuCount": int(gpu.get("count", 1)),
        "cloudType": body.get("cloud") or "SECURE",
        "dataCenterId": datacenter,
        "networkVolumeId": network["volumeId"] if network else None,
        "containerDiskInGb": int(body.get("disk") or 50),
        "volumeInGb": int(persistent.get("size") or 0),
        "volumeMountPath": (network or persistent).get("path") or "/workspace",
        "ports": ",".join(body.get("ports") or ["8888/http", "22/tcp"]),
        "env": [{"key": k, "value": str(val)} for k, val in (body.get("env") or {}).items()],
        "dockerArgs": body.get("args") or "",
        "templateId": body.get("templateId"),
        "allowedCudaVersions": list(gpu.get("allowedCudaVersions") or []),
        "minCudaVersion": gpu.get("minCudaVersion"),
        "containerRegistryAuthId": body.get("registry"),
    }


def _create(model: SandboxModel, body: dict[str, Any]) -> Response:  # noqa: PLR0911 - one answer per rule
    gpu, mounts = body.get("gpu") or {}, body.get("mounts") or {}
    if gpu.get("allowedCudaVersions") and gpu.get("minCudaVersion"):
        return v.bad_request("allowedCudaVersions and minCudaVersion are mutually exclusive")
    if mounts.get("network") and mounts.get("persistent"):
        return v.bad_request("mounts.network and mounts.persistent are mutually exclusive")
    wanted = list(body.get("dataCenterIds") or [])
    network = (mounts.get("network") or [None])[0]
    if network:
        volume = model.volumes.get(network["volumeId"])
        if volume is None:
            return v.bad_request(f"network volume {network['volumeId']} not found")
        if wanted and volume.datacenter_id not in wanted:
            return v.bad_request(
                f"network volume {volume.id} is in {volume.datacenter_id}, "
                "not in the requested data centers"
            )
    last: SandboxError | None = None
    for datacenter in wanted or [None]:
        try:
            pod = model.create_pod(_spec(body, datacenter))
        except SandboxError as exc:
            last = exc
            if str(exc) in CAPACITY:
                continue  # the next preferred data center
            return refusal(exc)
        with model.lock:
            return v.ok(v.pod_view(model, pod), 201)
    assert last is not None
    return refusal(last)


async def pods(request: Request) -> Response:
    model, role = _model(request), v.key_role(request)
    if role is None:
        return v.unauthorized()
    if request.method == "GET":

        def listing() -> Response:
            try:
                with model.lock:
                    return v.ok({"pods": [v.pod_view(model, p) for p in model.account_pods()]})
            except SandboxError as exc:
                return refusal(exc)

        return await run_in_threadpool(listing)
    if role != "rw":
        return v.forbidden()
    try:
        body = await v.json_body(request)
    except ValueError:
        return v.unprocessable("$: body is not JSON")
    errors = _create_errors(body)
    if errors:
        return v.unprocessable(*errors)
    return await run_in_threadpool(_create, model, body)


def _patch(model: SandboxModel, pod_id: str, body: dict[str, Any]) -> Response:
    with model.lock:
        pod = model.find_pod(pod_id)
        if pod is None:
            return v.not_found("pod not found")
        mounts = body.get("mounts") or {}
        if mounts:
            current = v.pod_view(model, pod)["mounts"]
            if set(mounts) - set(current) or mounts.get("network") == []:
                return v.bad_request("the mount kind is fixed at create")
            net = (mounts.get("network") or [None])[0]
            if net and net.get("volumeId") != pod.network_volume_id:
                return v.bad_request("a network mount's volumeId is immutable")
            pod.volume_mount_path = (net or mounts.get("persistent") or {}).get(
                "path", pod.volume_mount_path
            )
        if "name" in body:
            pod.name = str(body["name"])
        if "image" in body:
            pod.image_name = str(body["image"])
        if "args" in body:
            pod.docker_args = str(body["args"])
        if "disk" in body:
            pod.container_disk_gb = int(body["disk"])
        if "ports" in body:
            pod.ports = ",".join(body["ports"])
        if "env" in body:
            pod.env = {str(k): str(val) for k, val in dict(body["env"]).items()}
        return v.ok(v.pod_view(model, pod))


async def pod(request: Request) -> Response:  # noqa: PLR0911 - one answer per rule
    model, role = _model(request), v.key_role(request)
    if role is None:
        return v.unauthorized()
    pod_id = request.path_params["pod_id"]
    if request.method == "GET":

        def read() -> Response:
            with model.lock:
                found = model.find_pod(pod_id)
                return v.ok(v.pod_view(model, found)) if found else v.not_found("pod not found")

        return await run_in_threadpool(read)
    if role != "rw":
        return v.forbidden()
    if request.method == "DELETE":
        return await run_in_threadpool(_act, model, pod_id, "terminate", False)
    try:
        body = await v.json_body(request)
    except ValueError:
        return v.unprocessable("$: body is not JSON")
    if not isinstance(body, dict) or not body:
        return v.unprocessable("$: at least one property is required")
    extra = [f"$: additional properties '{k}' not allowed" for k in body if k not in PATCH_FIELDS]
    if extra:
        return v.unprocessable(*extra)
    return await run_in_threadpool(_patch, model, pod_id, body)


def _act(model: SandboxModel, pod_id: str, action: str, check_allowed: bool = True) -> Response:
    with model.lock:
        found = model.find_pod(pod_id)
        if found is None:
            return v.not_found("pod not found")
        status = v.v2_status(model, found)
        if check_allowed and action not in v.ACTIONS.get(status, []):
            return v.problem(409, "Conflict", f"cannot {action} a pod in status {status}")
    try:
        if action == "terminate":
            model.terminate_pod(pod_id)
            return Response(status_code=204)
        if action == "stop":
            result = model.stop_pod(pod_id)
        elif action == "start":
            result = model.resume_pod(pod_id)
        else:  # restart: stop and start on the same machine (inference)
            model.stop_pod(pod_id)
            result = model.resume_pod(pod_id)
    except SandboxError as exc:
        return refusal(exc)
    with model.lock:
        return v.ok(v.pod_view(model, result))


async def pod_action(request: Request) -> Response:
    model, role = _model(request), v.key_role(request)
    if role is None:
        return v.unauthorized()
    if role != "rw":
        return v.forbidden()
    try:
        body = await v.json_body(request)
    except ValueError:
        return v.unprocessable("$: body is not JSON")
    if (
        not isinstance(body, dict)
        or set(body) != {"action"}
        or body["action"] not in ("start", "stop", "restart", "terminate")
    ):
        return v.unprocessable(
            "$.action: one of start, stop, restart, terminate (and nothing else)"
        )
    return await run_in_threadpool(_act, model, request.path_params["pod_id"], body["action"])


class StreamCut(Exception):
    """Raised inside a log stream to drop the connection mid-response (the abrupt cut fault)."""


def _event(t: Any, seq: int, source: str, line: str) -> str:
    """`id: <time>/<12-digit sequence>` then `data: {ts, source, line}` (REST v2 spec)."""
    data = json.dumps({"ts": iso(t), "source": source, "line": line})
    return f"id: {t.strftime('%Y-%m-%dT%H:%M:%SZ')}/{seq:012d}\ndata: {data}\n\n"


def _after_seq(last_id: str) -> int | None:
    tail = last_id.rpartition("/")[2].strip()
    return int(tail) if tail.isdigit() else None


def _snapshot(model: Any, pod_id: str, wanted: Any) -> tuple[list[tuple[Any, int, str, str]], int]:
    """The Pod's wanted lines so far, and how many lines it has in all. A Pod's lines are only
    ever appended: each poll of a stream reads from where the last one ended, not the whole
    list (a thousand streams scanning whole logs 20 times a second made the sandbox, not the
    control plane, the scale bench's limit)."""
    with model.log_lock:
        everything = model.pod_logs.get(pod_id, [])
        return [e for e in everything if wanted(e)], len(everything)


async def pod_logs(request: Request) -> Response:
    """SSE: backfill (Last-Event-ID, else since, else tail), then live lines until the Pod has
    stopped and its container wrote its last line; `: keep-alive` comments while idle."""
    model, role = _model(request), v.key_role(request)
    if role is None:
        return v.unauthorized()
    pod_id = request.path_params["pod_id"]
    if model.find_pod(pod_id) is None:
        return v.not_found("pod not found")
    q = request.query_params
    source = q.get("source")
    if source not in (None, "container", "system"):
        return v.unprocessable("$.source: container or system")
    try:
        tail = int(q.get("tail", 100))
        since = parse_time(q.get("since"))
    except ValueError:
        return v.unprocessable("$.tail: 0..5000; $.since: RFC 3339")
    if not 0 <= tail <= 5000:
        return v.unprocessable("$.tail: 0..5000")
    after_seq = _after_seq(request.headers.get("last-event-id", ""))

    def wanted(entry: tuple[Any, int, str, str]) -> bool:
        return source is None or entry[2] == source

    async def stream() -> AsyncIterator[str]:
        lines, read_to = _snapshot(model, pod_id, wanted)
        if after_seq is not None:
            backfill = [e for e in lines if e[1] > after_seq]
        elif since is not None:
            backfill = [e for e in lines if e[0] >= since]
        else:
            backfill = lines[-tail:] if tail else []
        seen = lines[-1][1] if lines else 0
        sent = 0

        def cut() -> bool:
            if not model.take_log_cut(sent):
                return False
            if model.faults.log_stream_cut_abrupt:
                raise StreamCut(f"log stream of {pod_id} cut after {sent} events")
            return True

        for entry in backfill:
            yield _event(*entry)
            sent += 1
            if cut():
                return
        pace = _Pace(model.log_poll_max_s)
        while True:
            await pace.wait()
            # Finished first, then the lines: a line written before the Pod finished is read
            # by this very look (the log has its own lock, apart from the model's).
            finished = model.log_finished(pod_id)
            with model.log_lock:
                kept = model.pod_logs.get(pod_id, [])
                fresh = [e for e in kept[read_to:] if e[1] > seen and wanted(e)]
                read_to = len(kept)
            for entry in fresh:
                seen = entry[1]
                yield _event(*entry)
                sent += 1
                if cut():
                    return
            if finished and not fresh:
                return  # nothing more will be written
            if pace.after(fresh=bool(fresh)):
                yield ": keep-alive\n\n"

    return StreamingResponse(
        stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )


class _Pace:
    """A log stream looks again every 50 ms while lines come and, while none do, backs off to
    the model's `log_poll_max_s` (a thousand followed Pods polled every 50 ms kept the
    sandbox's core busy with wakeups: the scale bench sets 0.5 s); a keep-alive every 15 s of
    quiet, well inside a client's read timeout (the adapter's: 120 s)."""

    MIN_S, KEEP_ALIVE_S = 0.05, 15.0

    def __init__(self, max_s: float) -> None:
        self.max_s = max(self.MIN_S, max_s)
        self.pause, self.idle_s = self.MIN_S, 0.0

    async def wait(self) -> None:
        await asyncio.sleep(self.pause)

    def after(self, *, fresh: bool) -> bool:
        """Note a look; True when a keep-alive is due."""
        if fresh:
            self.pause, self.idle_s = self.MIN_S, 0.0
            return False
        self.idle_s += self.pause
        self.pause = min(self.pause * 2, self.max_s)
        if self.idle_s < self.KEEP_ALIVE_S:
            return False
        self.idle_s = 0.0
        return True


routes = [
    Route("/v2/pods", pods, methods=["GET", "POST"]),
    Route("/v2/pods/{pod_id}", pod, methods=["GET", "PATCH", "DELETE"]),
    Route("/v2/pods/{pod_id}/action", pod_action, methods=["POST"]),
    Route("/v2/pods/{pod_id}/logs", pod_logs, methods=["GET"]),
]
