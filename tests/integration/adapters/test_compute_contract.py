"""The ComputeProvider contract, once per RunPod wire (GraphQL and REST v2), each through the
one RunPodCompute that holds the launch/look-again/re-read algorithm."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from adapters.runpod import APIS, make_compute
from application.ports import ComputeProvider
from tests.integration.adapters.contract_compute import ComputeProviderContract


@pytest.mark.parametrize("api", APIS, scope="class")
class TestRunPodCompute(ComputeProviderContract):
    @pytest.fixture(autouse=True)
    def _wire(self, api: str) -> None:
        """Chooses the wire before `provider` builds the adapter (autouse fixtures run first)."""
        self.api = api

    def build(self, base_url: str, sleep: Callable[[float], None]) -> ComputeProvider:
        return make_compute(self.api, base_url, sleep=sleep, timeout_s=5)
