"""Offers that can be placed (R5): both wires' catalog answers turned into offers whose stock
is on CUDA 13 hosts only, with the datacenters whose stock is on older drivers named apart."""

from __future__ import annotations

from typing import Any

from adapters.runpod import graphql_mapping, rest_mapping


def rest_gpu(gpu_id: str, dcs: dict[str, str]) -> dict[str, Any]:
    return {
        "id": gpu_id,
        "name": gpu_id,
        "memory": 141,
        "secure": True,
        "price": {"secure": 3.59},
        "dataCenters": [{"id": dc, "availability": level} for dc, level in dcs.items()],
    }


def test_rest_v2_stock_on_older_drivers_only_is_no_offer_and_is_named() -> None:
    placeable = {"gpus": [rest_gpu("H200", {"US-KS-2": "LOW"})]}
    every = {
        "gpus": [
            rest_gpu("H200", {"EU-RO-1": "MEDIUM", "US-KS-2": "LOW"}),
            rest_gpu("OLD", {"EU-RO-1": "HIGH"}),  # left out of the filtered answer entirely
        ]
    }
    offers = {o.id: o for o in rest_mapping.gpu_offers(placeable, every)}
    assert offers["H200"].datacenters == ["US-KS-2"]
    assert offers["H200"].no_cuda13 == ("EU-RO-1",)
    assert (offers["OLD"].datacenters, offers["OLD"].no_cuda13) == ([], ("EU-RO-1",))


def test_graphql_a_type_on_no_cuda13_host_anywhere_has_no_stock_and_names_its_datacenters() -> None:
    def gpu(gpu_id: str, on_cuda13: str | None) -> dict[str, Any]:
        return {
            "id": gpu_id,
            "displayName": gpu_id,
            "memoryInGb": 80,
            "secureCloud": True,
            "lowestPrice": {"uninterruptablePrice": 2.0, "stockStatus": "High"},
            "onCuda13": {"stockStatus": on_cuda13},
        }

    data = {
        "gpuTypes": [gpu("OLD", None), gpu("NEW", "High")],
        "dataCenters": [
            {
                "id": "EU-RO-1",
                "gpuAvailability": [
                    {"gpuTypeId": "OLD", "stockStatus": "High"},
                    {"gpuTypeId": "NEW", "stockStatus": "High"},
                ],
            }
        ],
    }
    offers = {o.id: o for o in graphql_mapping.gpu_offers(data)}
    assert (offers["OLD"].datacenters, offers["OLD"].no_cuda13) == ([], ("EU-RO-1",))
    assert (offers["NEW"].datacenters, offers["NEW"].no_cuda13) == (["EU-RO-1"], ())
    assert 'allowedCudaVersions: ["13.0"' in graphql_mapping.gpus_query(1)
