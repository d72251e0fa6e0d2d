"""REST v2 Serverless (/v2/serverless*) and each endpoint's OpenAI-compatible route (V4).

An endpoint is a name, GPU pools, `workers {min, max, idleTimeout}`, network volumes, datacenters
and the worker-vllm env. Workers live on the sandbox clock: a request with no worker up starts
one (a cold start: the worker loads the base model from the volume), a worker idle for
`idleTimeout` seconds scales to zero (unless `min` keeps it), and only the seconds a worker
spends answering are charged to the ledger at its pool's per-second price (RunPod stopped
billing initializing and idle workers). Adapters are found by name under
`VLLM_LORA_RESOLVER_CACHE_DIR` on the volume, as vLLM's filesystem resolver finds them.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import string
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from . import rest_v2_views as v
from .billing_api import iso
from .model import CreatedThenFailed, HeldCreate, SandboxModel
from .serving_checks import WorkerError, check_adapter

WORKER_COMMAND = (sys.executable, "-m", "runpod_sandbox.serving_worker")


@dataclass
class Completion:
    text: str
    pieces: list[str]
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str


class WorkerProcess:
    """A worker's container: a child process answering one JSON request a line."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[str] | None = None

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
                self.proc = subprocess.Popen(  # noqa: S603 - our own module, no shell
                    WORKER_COMMAND,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                    env=env,
                )
            assert self.proc.stdin is not None and self.proc.stdout is not None
            try:
                self.proc.stdin.write(json.dumps(request) + "\n")
                self.proc.stdin.flush()
                line = self.proc.stdout.readline()
            except OSError:
                line = ""
            if not line:
                raise WorkerError(500, "the worker exited", "InternalError")
            reply: dict[str, Any] = json.loads(line)
            return reply

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(5)


# Flex per-second prices per pool (RunPod's serverless pricing table; 16 GB and the newest
# pools are the sandbox's assumption).
POOL_PRICES: dict[str, Decimal] = {
    "AMPERE_16": Decimal("0.00016"),
    "AMPERE_24": Decimal("0.00019"),
    "ADA_24": Decimal("0.00019"),
    "AMPERE_48": Decimal("0.00034"),
    "ADA_48_PRO": Decimal("0.00053"),
    "AMPERE_80": Decimal("0.00076"),
    "ADA_80_PRO": Decimal("0.00116"),
    "HOPPER_141": Decimal("0.00155"),
    "BLACKWELL_96": Decimal("0.00111"),
    "BLACKWELL_180": Decimal("0.00240"),
}
CPU_PRICE = Decimal("0.00004")  # per second, a CPU worker (inference)
CREATE_FIELDS = {
    "name",
    "type",
    "scaling",
    "gpu",
    "cpu",
    "workers",
    "dataCenterIds",
    "networkVolumes",
    "timeout",
    "flashboot",
    "image",
    "args",
    "disk",
    "ports",
    "env",
    "registry",
    "templateId",
}
PATCH_FIELDS = CREATE_FIELDS - {"type", "gpu", "cpu"} | {"gpu"}
VOLUME_MOUNT = "/runpod-volume"
DEFAULT_WORKERS = {"min": 0, "max": 3, "idleTimeout": 5}
QUEUE_WAIT_SECONDS = 30.0  # a request with no worker allowed (max 0) waits this long, then 503


def _id() -> str:
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(14))


@dataclass
class Worker:
    id: str
    pool: str
    created_at: datetime
    last_active_at: datetime
    busy: int = 0
    ready: bool = False
    cold_start_ms: int | None = None
    requests: int = 0
    process: WorkerProcess = field(default_factory=WorkerProcess)

    def status(self) -> str:
        if not self.ready:
            return "INITIALIZING"
        return "RUNNING" if self.busy else "IDLE"


@dataclass
class Endpoint:
    id: str
    body: dict[str, Any]  # what was created (and patched), in REST v2 words
    created_at: datetime
    workers: list[Worker] = field(default_factory=list)
    cold_starts: int = 0
    requests: int = 0
    deleted_at: datetime | None = None

    @property
    def scale(self) -> dict[str, int]:
        return {**DEFAULT_WORKERS, **(self.body.get("workers") or {})}

    @property
    def env(self) -> dict[str, str]:
        return {str(k): str(val) for k, val in (self.body.get("env") or {}).items()}

    @property
    def pools(self) -> list[str]:
        return list((self.body.get("gpu") or {}).get("pools") or [])

    def price(self) -> Decimal:
        pool = self.pools[0] if self.pools else None
        count = int((self.body.get("gpu") or {}).get("count") or 1)
        return POOL_PRICES.get(pool, CPU_PRICE) * count if pool else CPU_PRICE


class Serverless:
    """The account's endpoints and their workers, under the model's lock and on its clock."""

    def __init__(self, model: SandboxModel, cold_start_seconds: float = 0.0) -> None:
        self.model = model
        self.endpoints: dict[str, Endpoint] = {}  # deleted ones too (the ledger names them)
        self.cold_start_seconds = cold_start_seconds

    # ---- the account ---------------------------------------------------------------------

    def live(self) -> list[Endpoint]:
        with self.model.lock:
            for ep in self.endpoints.values():
                self._reap(ep)
            return [ep for ep in self.endpoints.values() if ep.deleted_at is None]

    def find(self, endpoint_id: str) -> Endpoint | None:
        with self.model.lock:
            ep = self.endpoints.get(endpoint_id)
            if ep is None or ep.deleted_at is not None:
                return None
            self._reap(ep)
            return ep

    def create(self, body: dict[str, Any]) -> Endpoint:
        """The endpoint exists once this returns; with the `hold_creates` fault its answer
        waits until the test releases it (a client killed meanwhile never learns its id),
        or answers 500 (`{"fail": true}`), as a Pod's create does."""
        with self.model.lock:
            now = self.model.settle()
            ep = Endpoint(_id(), body, now)
            self.endpoints[ep.id] = ep
            self._reap(ep)
            held = None
            faults = self.model.faults
            if faults.hold_creates:
                n = faults.hold_creates
                self.model.faults = replace(faults, hold_creates=n - 1 if n > 0 else -1)
                held = self.model.held[ep.id] = HeldCreate(ep.id, str(body.get("name")), now)
        if held is not None:
            self.model._wait_held(held)  # raises CreatedThenFailed when released failing
        return ep

    def delete(self, endpoint_id: str) -> bool:
        with self.model.lock:
            ep = self.find(endpoint_id)
            if ep is None:
                return False
            ep.deleted_at = self.model.settle()
            for w in ep.workers:
                w.process.stop()
            ep.workers.clear()
            return True

    def stop_all(self) -> None:
        """The sandbox stops: every worker process goes."""
        with self.model.lock:
            for ep in self.endpoints.values():
                for w in ep.workers:
                    w.process.stop()
                ep.workers.clear()

    def _reap(self, ep: Endpoint) -> None:
        """Scale to zero on the sandbox clock: idle workers past idleTimeout go, `min` stay."""
        now = self.model.clock.now()
        scale = ep.scale
        keep = []
        for w in ep.workers:
            idle = (now - w.last_active_at).total_seconds()
            if w.busy or not w.ready or idle < scale["idleTimeout"]:
                keep.append(w)
        # The longest-idle workers go first; `min` of them stay up (warm, not billed while idle).
        gone = [w for w in ep.workers if w not in keep]
        gone.sort(key=lambda w: w.last_active_at, reverse=True)
        while len(keep) < scale["min"] and gone:
            keep.append(gone.pop(0))
        for w in ep.workers:
            if w not in keep:
                w.process.stop()  # scaled to zero: what it loaded is gone
        ep.workers = keep
        while len(ep.workers) < min(scale["min"], scale["max"]):
            ep.workers.append(Worker(_id(), self._pool(ep), now, now))

    @staticmethod
    def _pool(ep: Endpoint) -> str:
        return ep.pools[0] if ep.pools else "CPU"

    # ---- a request's worker ------------------------------------------------------------

    def take_worker(self, ep: Endpoint) -> Worker | None:
        """An up worker (the least busy), a new one when none is up and max allows, or None."""
        with self.model.lock:
            self._reap(ep)
            now = self.model.clock.now()
            ready = [w for w in ep.workers if w.ready and not w.busy]
            if ready:
                worker = ready[0]
            elif len(ep.workers) < ep.scale["max"]:
                worker = Worker(_id(), self._pool(ep), now, now)
                ep.workers.append(worker)
            elif ep.workers:
                worker = min(ep.workers, key=lambda w: w.busy)
            else:
                return None
            worker.busy += 1
            worker.last_active_at = now
            return worker

    def warm_up(self, ep: Endpoint, worker: Worker, base: Path) -> None:
        """A cold start: the worker loads the base model (recorded on the worker and endpoint)."""
        if worker.ready:
            return
        began = time.monotonic()
        if self.cold_start_seconds:
            time.sleep(self.cold_start_seconds)
        reply = worker.process.ask({"warm": True, "base": str(base)})
        if not reply.get("ok"):
            raise WorkerError(int(reply["status"]), str(reply["message"]), str(reply["kind"]))
        with self.model.lock:
            if not worker.ready:
                worker.ready = True
                worker.cold_start_ms = int((time.monotonic() - began) * 1000)
                ep.cold_starts += 1

    def release(self, ep: Endpoint, worker: Worker, started: datetime) -> None:
        """The request is answered: its seconds are charged at the pool's price."""
        with self.model.lock:
            now = self.model.settle()
            worker.busy -= 1
            worker.requests += 1
            worker.last_active_at = now
            ep.requests += 1
            self.model.ledger.add(
                "serverless",
                ep.id,
                "gpu" if ep.pools else "cpu",
                start=started,
                end=max(now, started),
                rate_per_second=ep.price(),
            )

    def volume_path(self, ep: Endpoint, path: str) -> Path | None:
        """`/runpod-volume/a/b` on this endpoint's network volume, as a folder on this machine."""
        volumes = ep.body.get("networkVolumes") or []
        if not path.startswith(VOLUME_MOUNT + "/") or not volumes:
            return None
        parts = [p for p in path[len(VOLUME_MOUNT) :].split("/") if p]
        if ".." in parts:
            return None
        return self.model.volume_dir(str(volumes[0])).joinpath(*parts)


# ---- REST v2 shapes ------------------------------------------------------------------------


def view(request: Request, ep: Endpoint) -> dict[str, Any]:
    base = str(request.base_url).rstrip("/")
    body = dict(ep.body)
    return {
        "id": ep.id,
        "name": body.get("name"),
        "type": body.get("type", "QUEUE"),
        "scaling": body.get("scaling") or {"type": "QUEUE_DELAY", "queueDelay": 4},
        "gpu": body.get("gpu"),
        "cpu": body.get("cpu"),
        "workers": ep.scale,
        "dataCenterIds": list(body.get("dataCenterIds") or []),
        "networkVolumes": list(body.get("networkVolumes") or []),
        "timeout": body.get("timeout", 600000),
        "flashboot": body.get("flashboot", "FLASHBOOT"),
        "image": body.get("image"),
        "env": ep.env,  # readable by anyone holding the account's key, as on RunPod
        "createdAt": iso(ep.created_at),
        "requestUrls": {
            "run": f"{base}/v2/{ep.id}/run",
            "runsync": f"{base}/v2/{ep.id}/runsync",
            "openai": f"{base}/v2/{ep.id}/openai/v1",
            "health": f"{base}/v2/{ep.id}/health",
        },
    }


def _serverless(request: Request) -> Serverless:
    sv: Serverless = request.app.state.serverless
    return sv


def _errors(body: Any, creating: bool) -> list[str]:  # noqa: PLR0912 - one check per rule
    if not isinstance(body, dict):
        return ["$: expected an object"]
    allowed = CREATE_FIELDS if creating else PATCH_FIELDS
    errors = [f"$: additional properties '{k}' not allowed" for k in body if k not in allowed]
    if creating:
        if not isinstance(body.get("name"), str) or not body["name"]:
            errors.append("$.name: required, minLength 1")
        if ("gpu" in body) == ("cpu" in body):
            errors.append("$: exactly one of gpu or cpu is required")
        if not body.get("image") and not body.get("templateId"):
            errors.append("$.image: required unless templateId is set")
    gpu = body.get("gpu")
    if gpu is not None:
        pools = gpu.get("pools") if isinstance(gpu, dict) else None
        if not isinstance(pools, list) or not pools or any(p not in POOL_PRICES for p in pools):
            errors.append(f"$.gpu.pools: one or more of {', '.join(POOL_PRICES)}")
    workers = body.get("workers")
    if workers is not None:
        if not isinstance(workers, dict) or set(workers) - {"min", "max", "idleTimeout"}:
            errors.append("$.workers: {min, max, idleTimeout}")
        else:
            scale = {**DEFAULT_WORKERS, **workers}
            if not all(isinstance(x, int) and not isinstance(x, bool) for x in scale.values()):
                errors.append("$.workers: integers")
            elif scale["min"] < 0 or scale["max"] < scale["min"]:
                errors.append("$.workers: 0 <= min <= max")
            elif not 1 <= scale["idleTimeout"] <= 3600:
                errors.append("$.workers.idleTimeout: 1..3600 seconds")
    if not isinstance(body.get("env", {}), dict):
        errors.append("$.env: expected an object of strings")
    volumes = body.get("networkVolumes", [])
    if not isinstance(volumes, list) or not all(isinstance(x, str) for x in volumes):
        errors.append("$.networkVolumes: a list of volume ids")
    return errors


def _placement(model: SandboxModel, body: dict[str, Any]) -> str | None:
    """Why RunPod refuses the volumes and datacenters, or None."""
    wanted = list(body.get("dataCenterIds") or [])
    for volume_id in body.get("networkVolumes") or []:
        volume = model.volumes.get(volume_id)
        if volume is None:
            return f"network volume {volume_id} not found"
        if wanted and volume.datacenter_id not in wanted:
            return f"network volume {volume_id} is in {volume.datacenter_id}, not in dataCenterIds"
    return None


def _gate(request: Request, write: bool) -> Response | None:
    role = v.key_role(request)
    if role is None:
        return v.unauthorized()
    model: SandboxModel = request.app.state.model
    if model.faults.extra.get("serverless_forbidden") or (write and role != "rw"):
        return v.forbidden()
    return None


async def endpoints(request: Request) -> Response:  # noqa: PLR0911 - one answer per rule
    sv = _serverless(request)
    refused = _gate(request, request.method != "GET")
    if refused is not None:
        return refused
    if request.method == "GET":
        return v.ok([view(request, ep) for ep in sv.live()])
    try:
        body = await v.json_body(request)
    except ValueError:
        return v.unprocessable("$: body is not JSON")
    errors = _errors(body, creating=True)
    if errors:
        return v.unprocessable(*errors)
    why = _placement(sv.model, body)
    if why:
        return v.bad_request(why)
    try:
        made = await run_in_threadpool(sv.create, body)  # a held create waits off the loop
    except CreatedThenFailed:
        return v.problem(500, "Internal Server Error", "Something went wrong.")
    return v.ok(view(request, made), 201)


async def endpoint(request: Request) -> Response:  # noqa: PLR0911 - one answer per rule
    sv = _serverless(request)
    refused = _gate(request, request.method != "GET")
    if refused is not None:
        return refused
    ep = sv.find(request.path_params["endpoint_id"])
    if ep is None:
        return v.not_found("endpoint not found")
    if request.method == "GET":
        return v.ok(view(request, ep))
    if request.method == "DELETE":
        sv.delete(ep.id)  # and the template bound to it
        return Response(status_code=204)
    try:
        body = await v.json_body(request)
    except ValueError:
        return v.unprocessable("$: body is not JSON")
    errors = _errors(body, creating=False) if body else ["$: at least one property is required"]
    if errors:
        return v.unprocessable(*errors)
    merged = {**ep.body, **body}
    why = _placement(sv.model, merged)
    if why:
        return v.bad_request(why)
    with sv.model.lock:
        ep.body = merged  # env replaces the whole env, as on RunPod
        sv._reap(ep)
    return v.ok(view(request, ep))


async def endpoint_workers(request: Request) -> Response:
    sv = _serverless(request)
    refused = _gate(request, False)
    if refused is not None:
        return refused
    ep = sv.find(request.path_params["endpoint_id"])
    if ep is None:
        return v.not_found("endpoint not found")
    with sv.model.lock:
        workers = [
            {
                "id": w.id,
                "status": w.status(),
                "isStale": False,
                "gpuTypeId": w.pool,
                "dataCenterId": (ep.body.get("dataCenterIds") or ["EU-RO-1"])[0],
                "startedAt": iso(w.created_at),
                "coldStartMs": w.cold_start_ms,
                "requests": w.requests,
            }
            for w in ep.workers
        ]
        summary = {
            "running": sum(1 for w in ep.workers if w.status() == "RUNNING"),
            "idle": sum(1 for w in ep.workers if w.status() == "IDLE"),
            "initializing": sum(1 for w in ep.workers if w.status() == "INITIALIZING"),
            "coldStarts": ep.cold_starts,
            "requests": ep.requests,
        }
    return v.ok({"workers": workers, "summary": summary})


# ---- the endpoint's own routes (api.runpod.ai/v2/<endpoint id>/...) -------------------------


def _openai_error(status: int, message: str, kind: str) -> Response:
    body = {"error": {"message": message, "type": kind, "code": status}}
    return JSONResponse(body, status_code=status)


def _worker_gate(request: Request) -> tuple[Endpoint | None, Response | None]:
    if v.key_role(request) is None:
        return None, JSONResponse({"error": "Unauthorized"}, status_code=401)
    ep = _serverless(request).find(request.path_params["endpoint_id"])
    if ep is None:
        return None, JSONResponse({"error": "endpoint not found"}, status_code=404)
    return ep, None


async def health(request: Request) -> Response:
    ep, refused = _worker_gate(request)
    if refused is not None or ep is None:
        return refused or v.not_found()
    with _serverless(request).model.lock:
        states = [w.status() for w in ep.workers]
    return v.ok(
        {
            "jobs": {"completed": ep.requests, "failed": 0, "inProgress": 0, "inQueue": 0},
            "workers": {
                "idle": states.count("IDLE"),
                "running": states.count("RUNNING"),
                "initializing": states.count("INITIALIZING"),
            },
        }
    )


def served_name(ep: Endpoint) -> str:
    env = ep.env
    return env.get("OPENAI_SERVED_MODEL_NAME_OVERRIDE") or env.get("MODEL_NAME", "")


async def models(request: Request) -> Response:
    ep, refused = _worker_gate(request)
    if refused is not None or ep is None:
        return refused or v.not_found()
    return v.ok({"object": "list", "data": [{"id": served_name(ep), "object": "model"}]})


def _request_errors(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: a non-empty list is required"
    for m in messages:
        if not isinstance(m, dict) or not isinstance(m.get("content"), str) or not m.get("role"):
            return "messages: each needs a role and a string content"
    max_tokens = body.get("max_tokens", body.get("max_completion_tokens", 16))
    if not isinstance(max_tokens, int) or not 1 <= max_tokens <= 512:
        return "max_tokens: 1..512 on this worker"
    temperature = body.get("temperature", 1.0)
    if not isinstance(temperature, int | float) or not 0 <= temperature <= 2:
        return "temperature: 0..2"
    return None


def _resolve(sv: Serverless, ep: Endpoint, model_name: str) -> tuple[Path, Path | None]:
    env = ep.env
    base_name = env.get("MODEL_NAME", "")
    base = sv.volume_path(ep, base_name)
    if base is None:
        raise WorkerError(500, f"{base_name!r} is not on this endpoint's volume", "InternalError")
    if model_name in ("", served_name(ep), base_name):
        return base, None
    lora_dir = env.get("VLLM_LORA_RESOLVER_CACHE_DIR", "")
    folder = sv.volume_path(ep, lora_dir) if env.get("ENABLE_LORA") == "true" else None
    if (
        folder is None
        or "/" in model_name
        or model_name.startswith(".")
        or not (folder / model_name).is_dir()
    ):
        raise WorkerError(404, f"The model `{model_name}` does not exist.", "NotFoundError")
    adapter = folder / model_name
    check_adapter(adapter, base_name, int(env.get("MAX_LORA_RANK") or 16))
    return base, adapter


async def chat_completions(request: Request) -> Response:  # noqa: PLR0911 - one answer per rule
    ep, refused = _worker_gate(request)
    if refused is not None or ep is None:
        return refused or v.not_found()
    sv = _serverless(request)
    try:
        body = json.loads(await request.body())
    except ValueError:
        return _openai_error(400, "the body is not JSON", "BadRequestError")
    problem = _request_errors(body)
    if problem:
        return _openai_error(400, problem, "BadRequestError")
    model_name = str(body.get("model") or "")
    try:
        base, adapter = _resolve(sv, ep, model_name)
    except WorkerError as exc:
        return _openai_error(exc.status, str(exc), exc.kind)
    deadline = time.monotonic() + QUEUE_WAIT_SECONDS
    worker = sv.take_worker(ep)
    while worker is None:  # max workers 0 (or RunPod lowered it): the job waits in the queue
        if time.monotonic() > deadline:
            return JSONResponse(
                {"error": "no worker is allowed to run (max workers 0)"},
                status_code=503,
                headers={"Retry-After": "30"},
            )
        await asyncio.sleep(0.1)
        worker = sv.take_worker(ep)
    started = sv.model.clock.now()
    try:
        await run_in_threadpool(sv.warm_up, ep, worker, base)
        job = {
            "base": str(base),
            "adapter": str(adapter) if adapter else None,
            "served_model": ep.env.get("MODEL_NAME", ""),
            "max_rank": int(ep.env.get("MAX_LORA_RANK") or 16),
            "messages": body["messages"],
            "max_tokens": int(body.get("max_tokens", body.get("max_completion_tokens", 16))),
            "temperature": float(body.get("temperature", 1.0)),
            "seed": body.get("seed"),
        }
        reply = await run_in_threadpool(worker.process.ask, job)
        if not reply.get("ok"):
            raise WorkerError(int(reply["status"]), str(reply["message"]), str(reply["kind"]))
        answer = Completion(**reply["completion"])
    except WorkerError as exc:
        return _openai_error(exc.status, str(exc), exc.kind)
    finally:
        sv.release(ep, worker, started)
    name = model_name or served_name(ep)
    completion_id = f"chatcmpl-{secrets.token_hex(12)}"
    created = int(time.time())
    if body.get("stream"):
        options = body.get("stream_options")
        usage = isinstance(options, dict) and options.get("include_usage") is True
        return StreamingResponse(
            _chunks(answer, completion_id, created, name, usage=usage),
            media_type="text/event-stream",
        )
    return v.ok(
        {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer.text},
                    "finish_reason": answer.finish_reason,
                }
            ],
            "usage": {
                "prompt_tokens": answer.prompt_tokens,
                "completion_tokens": answer.completion_tokens,
                "total_tokens": answer.prompt_tokens + answer.completion_tokens,
            },
        }
    )


async def _chunks(
    answer: Completion, cid: str, created: int, name: str, *, usage: bool = False
) -> AsyncIterator[str]:
    """As vLLM streams: with `stream_options.include_usage`, every chunk has `usage: null` and
    one last chunk with no choices carries the usage."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        body: dict[str, Any] = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": name,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        if usage:
            body["usage"] = None
        return f"data: {json.dumps(body)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    for piece in answer.pieces:
        yield chunk({"content": piece})
    yield chunk({}, answer.finish_reason)
    if usage:
        last = {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": name,
            "choices": [],
            "usage": {
                "prompt_tokens": answer.prompt_tokens,
                "completion_tokens": answer.completion_tokens,
                "total_tokens": answer.prompt_tokens + answer.completion_tokens,
            },
        }
        yield f"data: {json.dumps(last)}\n\n"
    yield "data: [DONE]\n\n"


routes = [
    Route("/v2/serverless", endpoints, methods=["GET", "POST"]),
    Route("/v2/serverless/{endpoint_id}", endpoint, methods=["GET", "PATCH", "DELETE"]),
    Route("/v2/serverless/{endpoint_id}/workers", endpoint_workers, methods=["GET"]),
    Route("/v2/{endpoint_id}/health", health, methods=["GET"]),
    Route("/v2/{endpoint_id}/openai/v1/models", models, methods=["GET"]),
    Route("/v2/{endpoint_id}/openai/v1/chat/completions", chat_completions, methods=["POST"]),
]
