"""The RunPod GraphQL adapter passes the ComputeProvider contract against the sandbox."""

from __future__ import annotations

from collections.abc import Callable

from adapters.runpod_graphql import RunPodGraphQLCompute
from application.ports import ComputeProvider
from tests.integration.adapters.contract_compute import ComputeProviderContract


class TestRunPodGraphQLContract(ComputeProviderContract):
    def build(self, base_url: str, sleep: Callable[[float], None]) -> ComputeProvider:
        return RunPodGraphQLCompute(base_url, sleep=sleep, timeout_s=5)
