"""The ComputeProvider contract, parametrized over both RunPod adapters (GraphQL and REST v2)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from adapters.compute_factory import make_compute
from application.ports import ComputeProvider
from tests.integration.adapters.contract_compute import ComputeProviderContract


class TestEveryRunPodAdapter(ComputeProviderContract):
    @pytest.fixture(params=["graphql", "rest"])
    def api(self, request: pytest.FixtureRequest) -> str:
        return str(request.param)

    @pytest.fixture
    def build_api(self, api: str) -> str:
        self._api = api
        return api

    def build(self, base_url: str, sleep: Callable[[float], None]) -> ComputeProvider:
        return make_compute(self._api, base_url, sleep=sleep, timeout_s=5)

    @pytest.fixture(autouse=True)
    def _choose(self, build_api: str) -> None:
        """Sets the adapter before `provider` builds it (autouse fixtures run first)."""
