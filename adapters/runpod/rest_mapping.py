"""REST v2 JSON turned into our port's values, and a PodSpec into a CreatePodRequest."""

from __future__ import annotations

from typing import Any

from adapters.runpod.mapping import RUN_ID_ENV, cuda_request, money, network_volume, pod_status
from application.ports import GpuOffer, NetworkVolume, PodInfo, PodSpec

LEVEL = {"HIGH": "High", "MEDIUM": "Medium", "LOW": "Low", "NONE": "None"}


def pod_info(raw: dict[str, Any]) -> PodInfo:
    gpu = raw.get("gpu") or {}
    mounts = raw.get("mounts") or {}
    network = (mounts.get("network") or [{}])[0] or {}
    persistent = mounts.get("persistent") or {}
    proxy = (raw.get("ssh") or {}).get("proxy") or {}
    runtime = raw.get("runtime")
    return PodInfo(
        id=str(raw["id"]),
        name=str(raw.get("name") or ""),
        status=pod_status(raw.get("status"), runtime),
        cost_per_hour=money(raw.get("cost")),
        gpu_type_id=gpu.get("id"),
        gpu_count=int(gpu.get("count") or 0) or 1,
        datacenter_id=raw.get("dataCenterId"),
        network_volume_id=network.get("volumeId") or None,
        # Basic SSH's username is the podHostId (RunPod's SSH docs; the v2 field: inference).
        pod_host_id=proxy.get("username"),
        uptime_seconds=int((runtime or {}).get("uptime") or 0),
        provider_status=raw.get("status"),
        container_disk_gb=int(raw.get("disk") or 0),
        volume_gb=int(persistent.get("size") or 0),
        run_id=(raw.get("env") or {}).get(RUN_ID_ENV),
    )


def volume(raw: dict[str, Any]) -> NetworkVolume:
    return network_volume(raw, "dataCenter")


def _stock(gpu: dict[str, Any]) -> dict[str, str]:
    return {
        str(dc["id"]): LEVEL.get(str(dc.get("availability")), "None")
        for dc in gpu.get("dataCenters") or []
    }


def gpu_offers(body: dict[str, Any], every_host: dict[str, Any] | None = None) -> list[GpuOffer]:
    """Secure-cloud GPU types from `GET /v2/catalog/gpus?include=AVAILABILITY&product=POD`
    asked with `minCudaVersion` (`body`); `every_host`, the same without it, names the
    datacenters whose stock is only on hosts of older drivers (`no_cuda13`)."""
    every = list((every_host or {}).get("gpus") or [])
    anywhere = {str(g["id"]): _stock(g) for g in every}
    placeable = list(body.get("gpus") or [])
    listed = {str(g["id"]) for g in placeable}
    # A type with no host of that CUDA anywhere may be left out of the filtered answer.
    gone = [{**g, "dataCenters": []} for g in every if str(g["id"]) not in listed]
    offers = []
    for gpu in placeable + gone:
        if gpu.get("secure") is False:
            continue  # network volumes and our launches are Secure Cloud only
        stock = _stock(gpu)
        older = sorted(
            dc
            for dc, level in anywhere.get(str(gpu["id"]), {}).items()
            if level != "None" and stock.get(dc, "None") == "None"
        )
        offers.append(
            GpuOffer(
                id=str(gpu["id"]),
                display_name=str(gpu.get("name") or gpu["id"]),
                memory_gb=int(gpu.get("memory") or 0),
                price_per_hour=money((gpu.get("price") or {}).get("secure")),
                stock=stock,
                no_cuda13=tuple(older),
            )
        )
    return offers


def create_body(spec: PodSpec) -> dict[str, Any]:
    """A CreatePodRequest: ONE GPU type, the volume under mounts.network, no fallback."""
    gpu: dict[str, Any] = {"id": spec.gpu_type_id, "count": spec.gpu_count}
    min_cuda, allowed = cuda_request(spec)
    if min_cuda:
        gpu["minCudaVersion"] = min_cuda
    if allowed:
        gpu["allowedCudaVersions"] = allowed
    body: dict[str, Any] = {
        "name": spec.name,
        "image": spec.image,
        "cloud": "SECURE",
        "gpu": gpu,
        "disk": spec.container_disk_gb,
        "env": dict(spec.env),
        "ports": ["8888/http", "22/tcp"],
        "startSsh": True,
    }
    if spec.registry_auth_id:
        body["registry"] = spec.registry_auth_id
    if spec.start_command:  # T1: the public image's command replaced by the bundle's boot
        body["args"] = spec.start_command
    if spec.datacenter_id:
        body["dataCenterIds"] = [spec.datacenter_id]
    if spec.network_volume_id:
        body["mounts"] = {
            "network": [{"volumeId": spec.network_volume_id, "path": spec.volume_mount_path}]
        }
    elif spec.volume_gb:
        body["mounts"] = {
            "persistent": {"size": max(10, spec.volume_gb), "path": spec.volume_mount_path}
        }
    return body
