"""Chooses the RunPod compute adapter: `TENSORANT_RUNPOD_API=graphql|rest` (default graphql)."""

from __future__ import annotations

from typing import Any

from application.ports import ComputeProvider

APIS = ("graphql", "rest")


def make_compute(api: str, base_url: str, **options: Any) -> ComputeProvider:
    """The adapter for `api`; `options` go to its constructor (timeouts, sleep, retries)."""
    choice = (api or "graphql").strip().lower()
    if choice == "graphql":
        from adapters.runpod_graphql import RunPodGraphQLCompute

        return RunPodGraphQLCompute(base_url, **options)
    if choice == "rest":
        from adapters.runpod_rest import RunPodRestCompute

        return RunPodRestCompute(base_url, **options)
    raise ValueError(f"TENSORANT_RUNPOD_API must be one of {', '.join(APIS)}, not {api!r}")
