"""Managed serving (V1): a verified adapter served from a RunPod Serverless endpoint on the
organization's own account.

One `Deployment` per (organization, run): its id is derived from both, so deploying the same run
twice is the same deployment. One endpoint per base model per organization serves every adapter
of that model (multi-LoRA): the endpoint's name is derived from the organization and the base
model, so the reactor finds it by name before any create and a crash never makes two. Adapters
are folders on the organization's network volume (vLLM's filesystem resolver loads them by
name), so adding one to an endpoint needs no restart.

Events carry ids, names and digests; never the RunPod key.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from domain.base import TensorantAggregate, stable_id, topic
from domain.base_models import STORAGE_PREFIX
from domain.errors import Conflict, DomainError

ENDPOINT_PREFIX = "tensorant-serve-"
VOLUME_MOUNT = "/runpod-volume"  # where a serverless worker sees the network volume
SERVING_DIR = "serving/loras"  # the adapters' folder on the volume (VLLM_LORA_RESOLVER_CACHE_DIR)
# The Hub cache a training Pod fills on the volume (the trainer's /workspace/.cache/huggingface):
# a gated base is served from it, so no Hugging Face token goes to the endpoint (V2).
HUB_CACHE = ".cache/huggingface"
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")

DEPLOYING, READY, FAILED, DELETING, DELETED = "deploying", "ready", "failed", "deleting", "deleted"


def deployment_id(org_id: str, run_id: str) -> str:
    return str(stable_id("deployment", f"{org_id}:{run_id}"))


def endpoint_name(org_id: str, base_model: str) -> str:
    """The deterministic endpoint name of an organization's base model (<= 40 characters)."""
    digest = hashlib.sha256(f"{org_id}\n{base_model}".encode()).hexdigest()[:20]
    return f"{ENDPOINT_PREFIX}{digest}"


def adapter_name(run_id: str) -> str:
    """The model name a chat request gives to reach this run's adapter."""
    return f"run-{run_id}"


def served_model(base_model: str) -> str:
    """The worker's MODEL_NAME: a Hub id as is, a model on storage as its path on the volume
    (what the served copy's `base_model_name_or_path` must equal)."""
    if base_model.startswith(STORAGE_PREFIX):
        return f"{VOLUME_MOUNT}/{base_model.removeprefix(STORAGE_PREFIX).strip('/')}"
    return base_model


def hub_cache_repo(model_id: str) -> str:
    """The model's folder in the volume's Hub cache (huggingface_hub's layout)."""
    return f"{HUB_CACHE}/models--{model_id.replace('/', '--')}"


class ServingNeedsNetworkVolume(Conflict):
    problem = "serving-needs-network-volume"
    title = "Managed serving needs a RunPod network volume"


class NotDeployable(Conflict):
    problem = "run-not-deployable"
    title = "The run has no verified adapter to deploy"


class DeploymentDeleted(DomainError):
    problem = "deployment-deleted"
    status = 409
    title = "The deployment is deleted"


class Deployment(TensorantAggregate):
    TOPIC = "tensorant.Deployment"

    class Event(TensorantAggregate.Event):
        TOPIC = "tensorant.Deployment.Event"

    class Created(Event, TensorantAggregate.Created):
        TOPIC = "tensorant.Deployment.Created"

    def __init__(self) -> None:
        """State is set by the created event's apply(); annotations below only document it."""

    org_id: str
    run_id: str
    base_model: str
    served_model: str
    adapter_name: str
    adapter_sha256: str
    endpoint_name: str
    volume_id: str
    datacenter_id: str
    endpoint_id: str | None
    adapter_added: bool
    deleting: bool
    gone: bool
    failed_reason: str | None

    @property
    def state(self) -> str:
        if self.gone:
            return DELETED
        if self.deleting:
            return DELETING
        if self.failed_reason:
            return FAILED
        return READY if self.endpoint_id and self.adapter_added else DEPLOYING

    @classmethod
    def request(
        cls,
        *,
        org_id: str,
        run_id: str,
        base_model: str,
        adapter_sha256: str,
        volume_id: str,
        datacenter_id: str,
        actor: str,
        at: datetime,
        served: str | None = None,
    ) -> Deployment:
        """`served`: the worker's MODEL_NAME when not `served_model(base_model)` (a gated base
        is served from its snapshot in the volume's Hub cache, V2)."""
        from uuid import UUID

        return cls._create(
            DeploymentRequested,
            id=UUID(deployment_id(org_id, run_id)),
            actor=actor,
            timestamp=at,
            org_id=org_id,
            run_id=run_id,
            base_model=base_model,
            served_model=served or served_model(base_model),
            adapter_name=adapter_name(run_id),
            adapter_sha256=adapter_sha256,
            endpoint_name=endpoint_name(org_id, base_model),
            volume_id=volume_id,
            datacenter_id=datacenter_id,
        )

    def request_again(self, adapter_sha256: str, actor: str, at: datetime) -> bool:
        """Deploy a deleted deployment again; False when it is live (nothing to do)."""
        if not self.gone:
            return False
        self._trigger(DeploymentRequestedAgain, actor, at, adapter_sha256=adapter_sha256)
        return True

    def add_adapter(self, sha256: str, actor: str, at: datetime) -> None:
        if not self.adapter_added and not self.deleting:
            self._trigger(AdapterAdded, actor, at, adapter_name=self.adapter_name, sha256=sha256)

    def bind_endpoint(self, endpoint_id: str, created: bool, actor: str, at: datetime) -> None:
        if self.endpoint_id != endpoint_id and not self.deleting:
            self._trigger(EndpointBound, actor, at, endpoint_id=endpoint_id, created=created)

    def fail(self, reason: str, actor: str, at: datetime) -> None:
        if not self.failed_reason and not self.deleting:
            self._trigger(DeploymentFailed, actor, at, reason=reason)

    def delete(self, actor: str, at: datetime) -> None:
        if self.gone:
            raise DeploymentDeleted(f"deployment {self.id} is already deleted")
        if not self.deleting:
            self._trigger(DeletionRequested, actor, at)

    def remove_adapter(self, actor: str, at: datetime) -> None:
        if self.deleting and self.adapter_added:
            self._trigger(AdapterRemoved, actor, at, adapter_name=self.adapter_name)

    def confirm_gone(self, endpoint_deleted: bool, actor: str, at: datetime) -> None:
        """RunPod no longer lists the endpoint (or it stays for the base model's other
        deployments) and the adapter is off the volume."""
        if self.deleting and not self.gone:
            self._trigger(DeploymentGone, actor, at, endpoint_deleted=endpoint_deleted)


@topic("tensorant.DeploymentRequested")
class DeploymentRequested(Deployment.Created):
    org_id: str
    run_id: str
    base_model: str
    served_model: str
    adapter_name: str
    adapter_sha256: str
    endpoint_name: str
    volume_id: str
    datacenter_id: str

    def apply(self, aggregate: Deployment) -> None:
        for name in (
            "org_id",
            "run_id",
            "base_model",
            "served_model",
            "adapter_name",
            "adapter_sha256",
            "endpoint_name",
            "volume_id",
            "datacenter_id",
        ):
            setattr(aggregate, name, getattr(self, name))
        aggregate.endpoint_id = None
        aggregate.adapter_added = aggregate.deleting = aggregate.gone = False
        aggregate.failed_reason = None


@topic("tensorant.DeploymentRequestedAgain")
class DeploymentRequestedAgain(Deployment.Event):
    adapter_sha256: str

    def apply(self, aggregate: Deployment) -> None:
        aggregate.adapter_sha256 = self.adapter_sha256
        aggregate.endpoint_id = None
        aggregate.adapter_added = aggregate.deleting = aggregate.gone = False
        aggregate.failed_reason = None


@topic("tensorant.DeploymentAdapterAdded")
class AdapterAdded(Deployment.Event):
    adapter_name: str
    sha256: str

    def apply(self, aggregate: Deployment) -> None:
        aggregate.adapter_added = True


@topic("tensorant.DeploymentEndpointBound")
class EndpointBound(Deployment.Event):
    endpoint_id: str
    created: bool  # False: an endpoint of that name was found (adopted) before any create

    def apply(self, aggregate: Deployment) -> None:
        aggregate.endpoint_id = self.endpoint_id


@topic("tensorant.DeploymentFailed")
class DeploymentFailed(Deployment.Event):
    reason: str

    def apply(self, aggregate: Deployment) -> None:
        aggregate.failed_reason = self.reason


@topic("tensorant.DeploymentDeletionRequested")
class DeletionRequested(Deployment.Event):
    def apply(self, aggregate: Deployment) -> None:
        aggregate.deleting = True


@topic("tensorant.DeploymentAdapterRemoved")
class AdapterRemoved(Deployment.Event):
    adapter_name: str

    def apply(self, aggregate: Deployment) -> None:
        aggregate.adapter_added = False


@topic("tensorant.DeploymentGone")
class DeploymentGone(Deployment.Event):
    endpoint_deleted: bool

    def apply(self, aggregate: Deployment) -> None:
        aggregate.gone = True
