"""Managed serving (V1, V2): deploy a run's verified adapter to a RunPod Serverless endpoint on
the organization's own account, chat with it through us, delete it until RunPod no longer lists
the endpoint.

`drive` is level-triggered and idempotent like the run reactor: it loads the deployment, does
the next side effect its state calls for, saves, and looks again. The adapter is unpacked into
the serving directory on the network volume and read back (sha256 of the weights, the served
model's name in its config) before the deployment binds an endpoint; the endpoint is looked up
by its deterministic name before any create, so a crash between RunPod's create and our save
leaves one endpoint, adopted by the next drive.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import threading
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from application.errors import (
    InsufficientPermissions,
    ProviderError,
    ProviderUnavailable,
    StorageCheckFailed,
)
from application.log import TensorantLog
from application.ports import (
    Clock,
    ObjectStore,
    S3Credentials,
    ServingEndpoint,
    ServingMeter,
    ServingProvider,
    StorageLocation,
)
from application.serving_usage import MemoryServingMeter
from domain.base import SYSTEM
from domain.base_models import BaseModelAccessDenied, BaseModelGated, gated_model
from domain.deployment import (
    ADAPTER_FILES,
    DELETED,
    DELETING,
    READY,
    SERVING_DIR,
    VOLUME_MOUNT,
    Deployment,
    NotDeployable,
    ServingNeedsNetworkVolume,
    deployment_id,
    endpoint_name,
    hub_cache_repo,
)
from domain.errors import Conflict, NotFound, TensorantError
from domain.run import SUCCEEDED, Run
from domain.storage import RUNPOD_VOLUME

log = logging.getLogger("tensorant.deployments")
WORKER_IMAGE = "runpod/worker-v1-vllm:v2.25.0"
MAX_LORA_RANK = 16  # worker-vllm's default; memory is reserved for max_loras x max_lora_rank
IDLE_TIMEOUT_S = 60
MAX_WORKERS = 2
# Which serverless pools fit a base model's memory (bf16 weights plus KV cache and LoRA slots).
POOLS_BY_SIZE = (
    (("70b", "27b"), ["AMPERE_80", "ADA_80_PRO"]),
    (("7b", "8b"), ["AMPERE_48", "ADA_48_PRO", "AMPERE_80"]),
)
SMALL_POOLS = ["ADA_24", "AMPERE_24", "AMPERE_48"]

LiveOnEndpoint = Callable[[str, str], list[str]]  # (org id, endpoint name) -> deployment ids
# (org id, older than) -> deployments left deploying or deleting since before that instant
Unfinished = Callable[[str, datetime], list[str]]
# A deployment the commands drive is left to them this long before the tick drives it too
# (two processes driving one deployment at once could both create its endpoint).
TICK_AFTER = timedelta(seconds=60)
SCALE_CHECK = timedelta(minutes=10)  # how often chat checks the endpoint's maximum workers


log = logging.getLogger("tensorant.serving")
CanRead = Callable[[str, str], None]  # (org id, base model): raises when the Hub token cannot
_REVISION = re.compile(r"[0-9a-f]{40}")


class ChatRateLimited(TensorantError):
    problem = "chat-rate-limited"
    status = 429
    title = "The organization's chat requests are over its rate limit"

    def __init__(self, detail: str, retry_after: int) -> None:
        super().__init__(detail)
        self.retry_after = retry_after


class BaseModelNotOnVolume(Conflict):
    problem = "base-model-not-on-volume"
    title = "The gated base model is not in the network volume's Hub cache"


class KeyLacksServerless(ProviderError):
    problem = "key-lacks-serverless"
    status = 422
    title = "The RunPod key has no Serverless permissions"


class DeploymentNotReady(Conflict):
    problem = "deployment-not-ready"
    title = "The deployment does not serve yet"


class ServingColdStart(ProviderUnavailable):
    problem = "serving-cold-start"
    title = "No worker of the endpoint came up in time"
    retry_after = 30  # seconds: a worker that was loading is usually up by then


LACKS_SERVERLESS = (
    "RunPod refused the organization's key on Serverless (HTTP 403). Managed serving needs a key "
    "with Serverless permissions: in RunPod's console, Settings > API Keys, give the key "
    "Read/Write on Serverless (or create a key with All permissions), then rotate it here "
    "(PUT /v1/connections/runpod). Nothing was deployed."
)


def pools_for(base_model: str) -> list[str]:
    name = base_model.lower()
    for marks, pools in POOLS_BY_SIZE:
        if any(m in name for m in marks):
            return list(pools)
    return list(SMALL_POOLS)


def endpoint_body(dep: Deployment) -> dict[str, Any]:
    """The REST v2 create body: worker-vllm, the volume's datacenter, scale to zero when idle,
    adapters loaded by name from the serving directory (vLLM's filesystem resolver)."""
    return {
        "name": dep.endpoint_name,
        "type": "QUEUE",
        "image": WORKER_IMAGE,
        "gpu": {"pools": pools_for(dep.base_model), "count": 1},
        "workers": {"min": 0, "max": MAX_WORKERS, "idleTimeout": IDLE_TIMEOUT_S},
        "networkVolumes": [dep.volume_id],
        "dataCenterIds": [dep.datacenter_id],
        "env": {
            "MODEL_NAME": dep.served_model,
            "ENABLE_LORA": "true",
            "MAX_LORAS": "8",
            "MAX_LORA_RANK": str(MAX_LORA_RANK),
            "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
            "VLLM_PLUGINS": "lora_filesystem_resolver",
            "VLLM_LORA_RESOLVER_CACHE_DIR": f"{VOLUME_MOUNT}/{SERVING_DIR}",
            # A base on the volume (a gated one's Hub snapshot among them) loads with nothing
            # fetched from the Hub, so the endpoint needs no Hugging Face token (V2).
            **({"HF_HUB_OFFLINE": "1"} if dep.served_model.startswith(VOLUME_MOUNT) else {}),
        },
    }


@dataclass(frozen=True)
class Deployed:
    deployment_id: str
    position: int


class DeploymentService:
    def __init__(
        self,
        log: TensorantLog,
        clock: Clock,
        serving: ServingProvider,
        objects: ObjectStore,
        runpod_key: Callable[[str], str],
        location: Callable[[str], tuple[StorageLocation, S3Credentials]],
        live_on_endpoint: LiveOnEndpoint,
        cold_start_bound_s: float = 120.0,
        unfinished: Unfinished | None = None,
        can_read: CanRead | None = None,
        meter: ServingMeter | None = None,
        rate_limit: int = 0,
        rate_window_s: float = 60.0,
        tick_after: timedelta = TICK_AFTER,
    ) -> None:
        self.log, self.clock, self.serving, self.objects = log, clock, serving, objects
        self.runpod_key, self.location = runpod_key, location
        self.live_on_endpoint = live_on_endpoint
        self.cold_start_bound_s = cold_start_bound_s
        self.unfinished = unfinished or (lambda _org, _before: [])
        self.can_read = can_read or (lambda _org, _base: None)
        self.meter: ServingMeter = meter or MemoryServingMeter()
        self.rate_limit, self.rate_window_s = rate_limit, rate_window_s
        self.tick_after = tick_after
        self._locks: dict[tuple[str, str], threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._scale_checked: dict[str, datetime] = {}  # endpoint id -> when its max was seen

    @contextmanager
    def _endpoint_lock(self, org_id: str, name: str) -> Iterator[None]:
        """One drive per endpoint name at a time in this process (two deployments of one base
        model must not both find no endpoint and both create one)."""
        with self._locks_lock:
            lock = self._locks.setdefault((org_id, name), threading.Lock())
        with lock:
            yield

    def _key(self, org_id: str) -> str:
        return self.runpod_key(org_id)

    def _list(self, key: str) -> list[ServingEndpoint]:
        try:
            return self.serving.list_endpoints(key)
        except InsufficientPermissions:
            raise KeyLacksServerless(LACKS_SERVERLESS) from None

    # ---------------------------------------------------------------- commands

    def deploy(self, org_id: str, run_id: str, actor: str) -> Deployed:
        location, creds = self.location(org_id)
        if location.kind != RUNPOD_VOLUME:
            raise ServingNeedsNetworkVolume(
                "managed serving loads the adapter from a RunPod network volume mounted on the "
                "endpoint's workers; this organization's storage is custom S3. Bind a RunPod "
                "network volume (PUT /v1/storage) to deploy."
            )
        run = self.log.load(Run, run_id, org_id)
        adapter = run.adapter or {}
        if run.state != SUCCEEDED or not adapter.get("verified_at"):
            raise NotDeployable(
                f"run {run_id} is {run.state}; only a succeeded run's verified adapter deploys"
            )
        base_model = run.config.base_model
        served = self._gated_base(org_id, base_model, location, creds)
        self._list(self._key(org_id))  # the key may do Serverless: refused before any change
        now = self.clock.now()
        try:
            dep = self.log.load(Deployment, deployment_id(org_id, run_id), org_id)
            if served is not None and dep.served_model != served:
                self._snapshot_on_volume(base_model, dep.served_model, location, creds)
            if not dep.request_again(str(adapter["sha256"]), actor, now):
                # Live already: deploying it again drives it (a crash may have left it halfway).
                return Deployed(str(dep.id), self.drive(org_id, str(dep.id)))
        except NotFound:
            dep = Deployment.request(
                org_id=org_id,
                run_id=run_id,
                base_model=base_model,
                adapter_sha256=str(adapter["sha256"]),
                volume_id=location.bucket,
                datacenter_id=location.region,
                actor=actor,
                at=now,
                served=served,
            )
        position = self.log.save_all(dep)
        return Deployed(str(dep.id), max(position, self.drive(org_id, str(dep.id))))

    def _gated_base(
        self, org_id: str, base_model: str, location: StorageLocation, creds: S3Credentials
    ) -> str | None:
        """A gated base (V2): the organization's token must still read it (asked of the Hub),
        and the endpoint serves the snapshot a training Pod left in the volume's Hub cache, so
        the token never goes to RunPod (an endpoint's env is readable with the account's key).
        The snapshot's path on the worker; None for a base that is not gated."""
        model = gated_model(base_model)
        if model is None:
            return None
        try:
            self.can_read(org_id, base_model)
        except BaseModelGated:
            raise BaseModelGated(
                f"{model.id} is gated on the Hugging Face Hub (licence {model.license}) and the "
                "organization has no Hugging Face token connected: connect one whose account "
                "accepted its licence (Settings → Connections, or PUT "
                "/v1/connections/huggingface), then deploy again. Nothing was deployed.",
                rule="base_model",
            ) from None
        except BaseModelAccessDenied as e:
            raise BaseModelAccessDenied(
                f"{e.detail.split('. Sign in', 1)[0]}. Accept the licence on the Hub as that "
                "account (or connect a token of an account that has access), then deploy "
                "again. Nothing was deployed.",
                **e.extra,
            ) from None
        served = self._served_on_endpoint(org_id, model.id)
        if served is None:
            repo = hub_cache_repo(model.id)
            try:
                revision = self.objects.get(location, creds, f"{repo}/refs/main").decode().strip()
            except StorageCheckFailed:
                revision = ""
            if not _REVISION.fullmatch(revision):
                raise self._not_on_volume(model.id, f"{repo}/refs/main")
            served = f"{VOLUME_MOUNT}/{repo}/snapshots/{revision}"
        self._snapshot_on_volume(model.id, served, location, creds)
        return served

    def _snapshot_on_volume(
        self, model_id: str, served: str, location: StorageLocation, creds: S3Credentials
    ) -> None:
        """The snapshot a worker will load has the model's config and weights."""
        folder = served.removeprefix(f"{VOLUME_MOUNT}/") + "/"
        names = {o.key.removeprefix(folder) for o in self.objects.list(location, creds, folder)}
        if "config.json" not in names or not any(n.endswith(".safetensors") for n in names):
            raise self._not_on_volume(model_id, folder)

    @staticmethod
    def _not_on_volume(model_id: str, where: str) -> BaseModelNotOnVolume:
        return BaseModelNotOnVolume(
            f"{model_id} is gated: its endpoint loads it from the network volume's Hugging Face "
            f"cache, which a training run on this volume fills, and {where} holds no complete "
            "copy (config.json and .safetensors weights). Train a run of this model on this "
            "volume (its Pod downloads it with the organization's token), then deploy again. "
            "The token itself never goes to the endpoint. Nothing was deployed.",
            rule="base_model",
        )

    def _served_on_endpoint(self, org_id: str, base_model: str) -> str | None:
        """The MODEL_NAME of the endpoint a live deployment of this base already uses: every
        adapter on it must name that one (the Hub cache may hold a newer snapshot since)."""
        for dep_id in self.live_on_endpoint(org_id, endpoint_name(org_id, base_model)):
            other = self.log.load(Deployment, dep_id, org_id)
            if other.base_model == base_model:
                return other.served_model
        return None

    def delete(self, org_id: str, dep_id: str, actor: str) -> int:
        dep = self.log.load(Deployment, dep_id, org_id)
        dep.delete(actor, self.clock.now())
        position = self.log.save_all(dep)
        return max(position, self.drive(org_id, dep_id))

    # ---------------------------------------------------------------- the reactor's part

    def drive_unfinished(self, org_id: str) -> None:
        """On the reconcile tick: drive what a crash left deploying or deleting (a create that
        took effect before the process died is adopted by name)."""
        for dep_id in self.unfinished(org_id, self.clock.now() - self.tick_after):
            self.drive(org_id, dep_id)

    def drive(self, org_id: str, dep_id: str) -> int:
        """Do what the deployment's state calls for next, until nothing is left; the position
        of the last event saved (0: none)."""
        dep = self.log.load(Deployment, dep_id, org_id)
        if dep.state == DELETED:
            return 0
        key = self._key(org_id)
        with self._endpoint_lock(org_id, dep.endpoint_name):
            if dep.state == DELETING:
                return self._drive_deletion(dep, key)
            if dep.failed_reason:
                return 0
            position = 0
            if not dep.adapter_added:
                position = self._add_adapter(dep)
                if dep.failed_reason:
                    return position
            if not dep.endpoint_id:
                position = max(position, self._bind_endpoint(dep, key))
            return position

    def _run_adapter(self, dep: Deployment) -> tuple[bytes, dict[str, Any]]:
        run = self.log.load(Run, dep.run_id, dep.org_id)
        adapter = run.adapter or {}
        location, creds = self.location(dep.org_id)
        data = self.objects.get(location, creds, str(adapter["object_key"]))
        return data, adapter

    def _add_adapter(self, dep: Deployment) -> int:
        """Unpack adapter_config.json + adapter_model.safetensors into the serving directory,
        naming the served model, then read both back and check them."""
        now = self.clock.now()
        data, _ = self._run_adapter(dep)
        if hashlib.sha256(data).hexdigest() != dep.adapter_sha256:
            dep.fail(
                "adapter-changed: the object in storage is not the adapter the run verified",
                SYSTEM,
                now,
            )
            return self.log.save_all(dep)
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            config = json.loads(zf.read("adapter_config.json"))
            weights = zf.read("adapter_model.safetensors")
        rank = config.get("r")
        if not isinstance(rank, int) or rank > MAX_LORA_RANK:
            dep.fail(
                f"adapter-rank-too-high: rank {rank} exceeds the {MAX_LORA_RANK} the endpoint "
                "serves",
                SYSTEM,
                now,
            )
            return self.log.save_all(dep)
        config["base_model_name_or_path"] = dep.served_model
        folder = f"{SERVING_DIR}/{dep.adapter_name}"
        location, creds = self.location(dep.org_id)
        config_bytes = json.dumps(config, indent=2, sort_keys=True).encode()
        self.objects.put(location, creds, f"{folder}/{ADAPTER_FILES[0]}", config_bytes)
        self.objects.put(location, creds, f"{folder}/{ADAPTER_FILES[1]}", weights)
        # Read back what a worker will load: the weights' digest and the served model's name.
        back_weights = self.objects.get(location, creds, f"{folder}/{ADAPTER_FILES[1]}")
        back_config = json.loads(self.objects.get(location, creds, f"{folder}/{ADAPTER_FILES[0]}"))
        digest = hashlib.sha256(weights).hexdigest()
        if (
            hashlib.sha256(back_weights).hexdigest() != digest
            or back_config.get("base_model_name_or_path") != dep.served_model
        ):
            dep.fail("adapter-copy-differs: the serving copy did not read back", SYSTEM, now)
        else:
            dep.add_adapter(digest, SYSTEM, now)
        return self.log.save_all(dep)

    def _bind_endpoint(self, dep: Deployment, key: str) -> int:
        found = [e for e in self._list(key) if e.name == dep.endpoint_name]
        created = not found
        if found:
            endpoint = found[0]
            if endpoint.workers_max < 1:  # RunPod cut an idle endpoint's maximum workers
                self.serving.patch_endpoint(
                    key, endpoint.id, {"workers": {"min": 0, "max": MAX_WORKERS}}
                )
        else:
            endpoint = self.serving.create_endpoint(key, endpoint_body(dep))
        dep.bind_endpoint(endpoint.id, created, SYSTEM, self.clock.now())
        return self.log.save_all(dep)

    def _drive_deletion(self, dep: Deployment, key: str) -> int:
        now = self.clock.now()
        if dep.adapter_added:
            location, creds = self.location(dep.org_id)
            for name in ADAPTER_FILES:
                self.objects.delete(location, creds, f"{SERVING_DIR}/{dep.adapter_name}/{name}")
            dep.remove_adapter(SYSTEM, now)
            self.log.save_all(dep)
        others = [
            d for d in self.live_on_endpoint(dep.org_id, dep.endpoint_name) if d != str(dep.id)
        ]
        if others:
            dep.confirm_gone(False, SYSTEM, now)
            return self.log.save_all(dep)
        for endpoint in self._list(key):
            if endpoint.name == dep.endpoint_name:
                try:  # 404 is success; a failure may have taken effect: the list below decides
                    self.serving.delete_endpoint(key, endpoint.id)
                except ProviderError as e:
                    log.warning("deleting endpoint %s answered %s", endpoint.id, e.detail[:200])
        if any(e.name == dep.endpoint_name for e in self._list(key)):
            return 0  # RunPod still lists it: the next drive deletes again
        dep.confirm_gone(True, SYSTEM, now)
        return self.log.save_all(dep)

    # ---------------------------------------------------------------- chat (V2)

    def _admit(self, org_id: str) -> None:
        """The organization's rate limit, before anything reaches RunPod: a token bucket of
        `rate_limit` requests refilled over `rate_window_s`, shared through the meter's store."""
        if self.rate_limit <= 0:
            return
        wait = self.meter.take(
            f"chat:{org_id}",
            float(self.rate_limit),
            self.rate_limit / self.rate_window_s,
            self.clock.now().timestamp(),
        )
        if wait:
            raise ChatRateLimited(
                f"the organization may send {self.rate_limit} chat requests per "
                f"{self.rate_window_s:g} s to its deployments; try again in {wait:g} s "
                "(nothing was sent to the endpoint)",
                retry_after=int(wait),
            )

    def _count(self, dep: Deployment, **counts: int) -> None:
        """Usage is bookkeeping: a store that fails must not fail the answer RunPod billed."""
        try:
            self.meter.add_usage(str(dep.id), {"requests": 1, **counts})
        except Exception:  # any store failure: logged, the answer goes on
            log.warning("usage of deployment %s not recorded", dep.id, exc_info=True)

    def usage(self, dep_ids: list[str]) -> dict[str, dict[str, int]]:
        return self.meter.usage(dep_ids)

    def _ready(self, org_id: str, dep_id: str) -> tuple[Deployment, str]:
        self._admit(org_id)
        dep = self.log.load(Deployment, dep_id, org_id)
        if dep.state != READY or not dep.endpoint_id:
            raise DeploymentNotReady(f"deployment {dep_id} is {dep.state}")
        key = self._key(org_id)
        self._restore_scale(key, dep.endpoint_id)
        return dep, key

    def _restore_scale(self, key: str, endpoint_id: str) -> None:
        """Before routing, at most once per SCALE_CHECK: RunPod cuts an idle endpoint's maximum
        workers (to 2 after 3 days, to 0 after 7), and at 0 every request would wait forever."""
        now = self.clock.now()
        seen = self._scale_checked.get(endpoint_id)
        if seen is not None and now - seen < SCALE_CHECK:
            return
        found = [e for e in self._list(key) if e.id == endpoint_id]
        if found and found[0].workers_max < MAX_WORKERS:
            self.serving.patch_endpoint(
                key, endpoint_id, {"workers": {"min": found[0].workers_min, "max": MAX_WORKERS}}
            )
        self._scale_checked[endpoint_id] = now

    @staticmethod
    def _request(dep: Deployment, body: dict[str, Any]) -> dict[str, Any]:
        # The deployment decides which adapter answers, whatever `model` the client sent.
        return {**body, "model": dep.adapter_name}

    def chat(
        self, org_id: str, dep_id: str, body: dict[str, Any]
    ) -> tuple[int, dict[str, str], bytes]:
        dep, key = self._ready(org_id, dep_id)
        try:
            status, headers, content = self.serving.chat(
                key, str(dep.endpoint_id), self._request(dep, body), self.cold_start_bound_s
            )
        except ProviderUnavailable as exc:
            self._count(dep, cold_starts=1)
            raise self._cold(exc) from None
        except ProviderError:
            self._count(dep, errors=1)
            raise
        if status < 400:
            self._count(dep, **_tokens(_json_object(content)))
        else:
            self._count(dep, errors=1)
        return self._relayed(status, headers, content)

    @staticmethod
    def _relayed(
        status: int, headers: dict[str, str], content: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        """The endpoint's answer as is, except its failures: a worker's 5xx is RunPod's
        failure (502), a 429 RunPod's queue limit (503 with its Retry-After)."""
        if status >= 500:
            raise ProviderError(
                f"the endpoint's worker failed (HTTP {status}): "
                f"{content[:300].decode(errors='replace')}"
            )
        if status == 429:
            raise ProviderUnavailable("RunPod limited the endpoint's requests (HTTP 429)")
        return status, headers, content

    @contextmanager
    def chat_stream(
        self, org_id: str, dep_id: str, body: dict[str, Any]
    ) -> Iterator[tuple[int, Iterator[bytes]]]:
        """Streamed; usage from the final chunk vLLM sends with `stream_options.include_usage`,
        which is always asked for and passed on only when the client asked for it."""
        dep, key = self._ready(org_id, dep_id)
        options = body.get("stream_options")
        wants_usage = isinstance(options, dict) and options.get("include_usage") is True
        upstream = {
            **self._request(dep, body),
            "stream_options": {
                **(options if isinstance(options, dict) else {}),
                "include_usage": True,
            },
        }
        try:
            with self.serving.chat_stream(
                key, str(dep.endpoint_id), upstream, self.cold_start_bound_s
            ) as (status, chunks):
                if status < 400:
                    yield status, self._metered(dep, chunks, wants_usage)
                else:  # an error is one small body: read it, relay or raise
                    self._count(dep, errors=1)
                    yield status, iter([self._relayed(status, {}, b"".join(chunks))[2]])
        except ProviderUnavailable as exc:
            self._count(dep, cold_starts=1)
            raise self._cold(exc) from None

    def _metered(
        self, dep: Deployment, chunks: Iterator[bytes], wants_usage: bool
    ) -> Iterator[bytes]:
        """The server-sent events as they come, one whole event at a time; the usage chunk is
        read (and dropped unless the client asked for it). Without one (a worker that ignores
        `include_usage`), completion tokens are counted as content chunks (vLLM sends one a
        token) and prompt tokens stay unknown (0)."""
        usage: dict[str, int] | None = None
        pieces, broke, rest = 0, False, b""
        try:
            for chunk in chunks:
                rest += chunk.replace(b"\r\n", b"\n")
                while b"\n\n" in rest:
                    event, rest = rest.split(b"\n\n", 1)
                    data = _event_data(event)
                    if data is not None and isinstance(data.get("usage"), dict):
                        usage = _tokens(data)
                        if not data.get("choices") and not wants_usage:
                            continue
                    if data is not None and _has_content(data):
                        pieces += 1
                    yield event + b"\n\n"
            if rest:
                yield rest
        except GeneratorExit:  # the client went away: not the endpoint's error
            raise
        except Exception:
            broke = True
            raise
        finally:
            counted = usage if usage is not None else {"completion_tokens": pieces}
            self._count(dep, errors=int(broke), **counted)

    def _cold(self, exc: ProviderUnavailable) -> ServingColdStart:
        return ServingColdStart(
            f"no worker of the endpoint answered within {self.cold_start_bound_s:g} s "
            f"(a cold start loads the base model): {exc.detail}"
        )


def _json_object(content: bytes) -> dict[str, Any]:
    try:
        body = json.loads(content)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _tokens(body: dict[str, Any]) -> dict[str, int]:
    """The OpenAI `usage` of an answer or a stream's last chunk (absent: nothing counted)."""
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return {}
    return {
        name: usage[name]
        for name in ("prompt_tokens", "completion_tokens")
        if isinstance(usage.get(name), int) and usage[name] >= 0
    }


def _event_data(event: bytes) -> dict[str, Any] | None:
    """The JSON object of an event's `data:` line (None for `[DONE]`, comments, others)."""
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            found = _json_object(line[5:].strip())
            return found or None
    return None


def _has_content(chunk: dict[str, Any]) -> bool:
    choices = chunk.get("choices")
    if not isinstance(choices, list):
        return False
    return any(
        isinstance(c, dict) and isinstance(c.get("delta"), dict) and bool(c["delta"].get("content"))
        for c in choices
    )
