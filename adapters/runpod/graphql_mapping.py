"""GraphQL: the query texts the SDK lacks, and RunPod's JSON turned into our port's values."""

from __future__ import annotations

import json
from typing import Any

from adapters.runpod.mapping import RUN_ID_ENV, money, network_volume, pod_status
from application.ports import Account, GpuOffer, NetworkVolume, PodInfo

# The SDK's <POD FIELDS> that we read, plus what it does not ask for but we need.
POD_FIELDS = """
    id name desiredStatus costPerHr gpuCount containerDiskInGb volumeInGb volumeMountPath
    imageName uptimeSeconds lastStatusChange networkVolumeId env
    runtime { ports { ip isIpPublic privatePort publicPort type } }
    machine { podHostId dataCenterId gpuDisplayName gpuTypeId }
"""

QUERY_ACCOUNT = "query account { myself { id email clientBalance currentSpendPerHr spendLimit } }"
QUERY_VOLUMES = "query volumes { myself { networkVolumes { id name size dataCenterId } } }"
QUERY_PODS = f"query myPods {{ myself {{ pods {{ {POD_FIELDS} }} }} }}"


def gql_string(value: str) -> str:
    """`value` escaped for a "..." GraphQL literal (the SDK's builders concatenate unescaped)."""
    return json.dumps(value)[1:-1]


def pod_query(pod_id: str) -> str:
    return f'query pod {{ pod(input: {{podId: "{gql_string(pod_id)}"}}) {{ {POD_FIELDS} }} }}'


# GraphQL's `lowestPrice` takes only an exact-match CUDA set, not a minimum: the CUDA 13
# versions RunPod's hosts report (RUNPOD_FACTS appendix B); a newer one must be added here.
CUDA13_VERSIONS = ("13.0", "13.1", "13.2")


def gpus_query(gpu_count: int) -> str:
    """Per type: its price and stock on any host, and its stock on CUDA 13 hosts (`onCuda13`);
    per datacenter: stock on any host (GraphQL's availability takes no CUDA filter)."""
    n = int(gpu_count)
    cuda = ", ".join(f'"{v}"' for v in CUDA13_VERSIONS)
    return (
        "query gpuOffers { gpuTypes { id displayName memoryInGb secureCloud securePrice "
        f"lowestPrice(input: {{gpuCount: {n}, secureCloud: true}}) "
        "{ uninterruptablePrice stockStatus } "
        f"onCuda13: lowestPrice(input: {{gpuCount: {n}, secureCloud: true, "
        f"allowedCudaVersions: [{cuda}]}}) {{ stockStatus }} }} "
        "dataCenters { id gpuAvailability { gpuTypeId stockStatus } } }"
    )


def _run_marker(env: Any) -> str | None:
    """GraphQL lists a Pod's env as "KEY=value" strings; only our marker is kept."""
    prefix = RUN_ID_ENV + "="
    for item in env or []:
        if isinstance(item, str) and item.startswith(prefix):
            return item[len(prefix) :]
    return None


def pod_info(raw: dict[str, Any]) -> PodInfo:
    machine = raw.get("machine") or {}
    return PodInfo(
        id=str(raw["id"]),
        name=str(raw.get("name") or ""),
        status=pod_status(raw.get("desiredStatus"), raw.get("runtime")),
        cost_per_hour=money(raw.get("costPerHr")),
        gpu_type_id=machine.get("gpuTypeId") or raw.get("gpuTypeId"),
        gpu_count=int(raw.get("gpuCount") or 0) or 1,
        datacenter_id=machine.get("dataCenterId") or raw.get("dataCenterId"),
        network_volume_id=raw.get("networkVolumeId") or None,
        pod_host_id=machine.get("podHostId"),
        uptime_seconds=int(raw.get("uptimeSeconds") or 0),
        provider_status=raw.get("desiredStatus"),
        container_disk_gb=int(raw.get("containerDiskInGb") or 0),
        volume_gb=int(raw.get("volumeInGb") or 0),
        run_id=_run_marker(raw.get("env")),
    )


def account(raw: dict[str, Any]) -> Account:
    limit = raw.get("spendLimit")
    return Account(
        id=str(raw["id"]),
        balance=money(raw.get("clientBalance")),
        spend_per_hour=money(raw.get("currentSpendPerHr")),
        spend_limit=money(limit) if limit is not None else None,
        email=raw.get("email"),
    )


def volume(raw: dict[str, Any]) -> NetworkVolume:
    return network_volume(raw, "dataCenterId")


def gpu_offers(data: dict[str, Any]) -> list[GpuOffer]:
    """Secure-cloud GPU types with per-GPU price and per-datacenter stock.

    Per-datacenter stock comes from `dataCenters.gpuAvailability`, which ignores the count; when
    `lowestPrice(gpuCount: N)` says no machine anywhere has N free, every datacenter is "None".
    GraphQL tells CUDA 13 stock per type only: a type in stock but on no CUDA 13 host anywhere
    (`onCuda13`) has its datacenters listed in `no_cuda13` and no stock; a type with CUDA 13
    hosts somewhere keeps every datacenter's stock (REST v2 tells them apart per datacenter).
    """
    stock: dict[str, dict[str, str]] = {}
    for dc in data.get("dataCenters") or []:
        for avail in dc.get("gpuAvailability") or []:
            stock.setdefault(avail["gpuTypeId"], {})[dc["id"]] = avail.get("stockStatus") or "None"
    offers = []
    for gpu in data.get("gpuTypes") or []:
        if gpu.get("secureCloud") is False:
            continue  # network volumes and our launches are Secure Cloud only
        lowest = gpu.get("lowestPrice") or {}
        price = lowest.get("uninterruptablePrice")
        per_dc = dict(stock.get(gpu["id"], {}))
        if not lowest.get("stockStatus") or lowest.get("stockStatus") == "None":
            per_dc = dict.fromkeys(per_dc, "None")
        older: list[str] = []
        on_cuda13 = gpu.get("onCuda13", {"stockStatus": "unknown"}) or {}
        if on_cuda13.get("stockStatus") in (None, "None"):
            older = sorted(dc for dc, level in per_dc.items() if level != "None")
            per_dc = dict.fromkeys(per_dc, "None")
        offers.append(
            GpuOffer(
                id=str(gpu["id"]),
                display_name=str(gpu.get("displayName") or gpu["id"]),
                memory_gb=int(gpu.get("memoryInGb") or 0),
                price_per_hour=money(price if price is not None else gpu.get("securePrice")),
                stock=per_dc,
                no_cuda13=tuple(older),
            )
        )
    return offers


def created_pod(created: dict[str, Any], spec_fields: dict[str, Any]) -> PodInfo:
    """A Pod from a create's answer alone (no price, no placement): used only when RunPod cannot
    read the new Pod back yet."""
    machine = created.get("machine") or {}
    return pod_info(
        {
            **created,
            "desiredStatus": "RUNNING",
            "runtime": None,
            **{k: v for k, v in spec_fields.items() if k != "machine"},
            "machine": {**machine, **spec_fields.get("machine", {})},
        }
    )
