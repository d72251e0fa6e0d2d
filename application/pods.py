"""What every side effect on a Pod relies on: its deterministic name, where its adapter goes,
and the one honest way to terminate it."""

from __future__ import annotations

from application import errors
from application.ports import POD_TERMINATED, ComputeProvider


def pod_name(run_id: str) -> str:
    """R5: deterministic per run, so a retried launch finds the Pod instead of making another."""
    return f"tensorant-run-{run_id}"


def adapter_key(run_id: str) -> str:
    """Where the trainer exports a run's adapter on the organization's storage."""
    return f"runs/{run_id}/adapter.zip"


def terminate_and_look(compute: ComputeProvider, key: str, pod_id: str) -> tuple[bool, str]:
    """Ask RunPod to terminate, then look: (still listed, error). Only a Pod RunPod no longer
    lists counts as terminated (K2); an answer of success proves nothing."""
    error = ""
    try:
        compute.terminate_pod(key, pod_id)
    except errors.ProviderError as e:
        error = e.detail
    try:
        pod = compute.get_pod(key, pod_id)
    except errors.ProviderError as e:
        return True, error or e.detail
    return pod is not None and pod.status != POD_TERMINATED, error
