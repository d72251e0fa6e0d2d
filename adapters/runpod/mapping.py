"""What both wires' answers share once translated: money, Pod statuses, the run marker."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from application.ports import (
    POD_ERROR,
    POD_RUNNING,
    POD_STARTING,
    POD_STOPPED,
    POD_TERMINATED,
    POD_UNKNOWN,
    NetworkVolume,
    PodSpec,
)

RUN_ID_ENV = "TENSORANT_RUN_ID"  # the ownership marker beside the name prefix (R5)
# RunPod lists a GPU type `unknown` that no Pod can be launched on (a placeholder, not an offer).
PLACEHOLDER_GPU_IDS = frozenset({"unknown"})


def money(value: Any) -> Decimal:
    """RunPod sends money as JSON floats; str() first so 0.34 stays 0.34."""
    if value is None or value == "":
        return Decimal(0)
    return Decimal(str(value))


# GraphQL's desiredStatus (Docker's container states plus TERMINATED) and REST v2's status share
# their words. Every word RunPod is known to send is here; anything else maps to POD_UNKNOWN,
# which the reconciler keeps as it is and reports (K2).
_STATUS = {
    "CREATED": POD_STARTING,  # GraphQL: the container exists and has not started yet
    "RESTARTING": POD_STARTING,  # GraphQL: RunPod restarts an exited container (T3)
    "PROVISIONING": POD_STARTING,  # REST v2
    "STARTING": POD_STARTING,  # REST v2
    # GraphQL: a frozen container still holds its machine's GPUs, so it bills like a running
    # Pod and must still be stopped; never read as stopped (inference: Docker's pause keeps
    # the container's resources).
    "PAUSED": POD_RUNNING,
    "EXITED": POD_STOPPED,
    "TERMINATED": POD_TERMINATED,
    "ERROR": POD_ERROR,  # REST v2
    "DEAD": POD_ERROR,  # GraphQL
}


def pod_status(provider_status: str | None, runtime: Any) -> str:
    """Our status for RunPod's desiredStatus (GraphQL) or status (REST v2); RUNNING without a
    runtime is still starting (v2 says RUNNING before ports exist)."""
    if provider_status == "RUNNING":
        return POD_RUNNING if runtime else POD_STARTING
    return _STATUS.get(str(provider_status or "").upper(), POD_UNKNOWN)


def cuda_request(spec: PodSpec) -> tuple[str | None, list[str]]:
    """(minCudaVersion, allowedCudaVersions) to send: RunPod refuses both at once, and the
    exact-match set is used only when no minimum is asked (R5, T1: CUDA 13 or newer, not
    exactly 13.0, which would shut out 13.1+ hosts)."""
    if spec.min_cuda_version:
        return spec.min_cuda_version, []
    return None, list(spec.allowed_cuda_versions)


def network_volume(raw: dict[str, Any], datacenter_field: str) -> NetworkVolume:
    """A network volume; only the name of its datacenter field differs between the APIs."""
    return NetworkVolume(
        id=str(raw["id"]),
        name=str(raw.get("name") or ""),
        size_gb=int(raw.get("size") or 0),
        datacenter_id=str(raw.get(datacenter_field) or ""),
    )
