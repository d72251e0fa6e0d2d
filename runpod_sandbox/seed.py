"""The seeded account: identical on every start, so credentials can be printed without a server.

Prices are indicative secure on-demand figures from public listings; ids and memory follow
RunPod's GPU-types reference.
Stock levels and which datacenter offers which GPU are invented (inference) but fixed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any


def _fixed_token(label: str, length: int) -> str:
    """A deterministic uppercase alphanumeric string (hex of a hash), stable across starts."""
    return hashlib.sha256(f"tensorant-sandbox:{label}".encode()).hexdigest().upper()[:length]


ACCOUNT_ID = "user_2TnsrntSandboxAcct0001"
EMAIL = "owner@sandbox.tensorant.dev"
PUB_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeSandboxKeyForTensorantOnly sandbox@tensorant"
API_KEY = "rpa_" + _fixed_token("api-key-read-write", 40)
READ_ONLY_API_KEY = "rpa_" + _fixed_token("api-key-read-only", 40)
# RunPod's S3 access key id is the user id; the secret starts with rps_ (RunPod's S3 API docs).
S3_ACCESS_KEY_ID = ACCOUNT_ID
S3_SECRET_ACCESS_KEY = "rps_" + _fixed_token("s3-secret", 40)
INITIAL_BALANCE = Decimal("250.00")
SPEND_LIMIT = Decimal("80")

CUSTOM_S3_BUCKET = "tensorant-custom"
CUSTOM_S3_REGION = "us-east-1"
CUSTOM_S3_ACCESS_KEY_ID = "AKIA" + _fixed_token("custom-s3-access", 16)
CUSTOM_S3_SECRET_ACCESS_KEY = _fixed_token("custom-s3-secret", 40)
S3_MOUNT = "/s3"

# The Hugging Face Hub's stand-in (runpod_sandbox/hub.py), served under HUB_MOUNT. Two users:
# the first accepted every gated catalogue model's licence; the second never asked for Llama.
HUB_MOUNT = "/hf"
HUB_USER = "sandbox-trainer"
HUB_TOKEN = "hf_" + _fixed_token("hub-token-full-access", 34)
HUB_RESTRICTED_USER = "sandbox-newcomer"
HUB_RESTRICTED_TOKEN = "hf_" + _fixed_token("hub-token-no-llama", 34)
# Gated repositories of the catalogue (the Hub asks for a licence first) and the open ones.
HUB_GATED = (
    "meta-llama/Llama-3.2-3B-Instruct",
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.3-70B-Instruct",
    "mistralai/Mistral-7B-Instruct-v0.3",
    "google/gemma-2-27b-it",
)
HUB_OPEN = ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-7B-Instruct")


@dataclass(frozen=True)
class DataCenter:
    id: str
    name: str
    location: str
    s3_api: bool
    # The CUDA version each kind of host here reports (its driver's), in placement order.
    cuda_versions: tuple[str, ...] = ("12.8",)


@dataclass(frozen=True)
class GpuType:
    id: str
    display_name: str
    memory_gb: int
    secure_price: Decimal
    community_price: Decimal | None
    cuda_cores: int
    # datacenter id -> stockStatus (High/Medium/Low/None)
    stock: dict[str, str] = field(default_factory=dict)
    manufacturer: str = "Nvidia"
    max_gpu_count: int = 8
    # datacenter id -> the CUDA versions of this type's hosts there, where they differ from the
    # datacenter's (`cuda_versions`): some types have no host on a CUDA 13 driver somewhere.
    host_cuda: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def secure_spot_price(self) -> Decimal:
        # Spot is roughly 70 % of on-demand on RunPod's listings (A100: 1.19 vs 1.64).
        return (self.secure_price * Decimal("0.7")).quantize(Decimal("0.01"))


@dataclass(frozen=True)
class SeedVolume:
    id: str
    name: str
    size_gb: int
    datacenter_id: str


# Hosts' CUDA versions are invented but fixed (inference): every datacenter has hosts of CUDA 13
# or newer, EUR-IS-1's only 13.x hosts are 13.1 (so an exact "13.0" request finds none there)
# and US-KS-2 has no host older than 13.0.
DATACENTERS: tuple[DataCenter, ...] = (
    DataCenter("EU-RO-1", "Romania 1", "Romania", s3_api=True, cuda_versions=("12.8", "13.0")),
    DataCenter("US-KS-2", "Kansas 2", "United States", s3_api=True, cuda_versions=("13.0", "13.1")),
    DataCenter("EUR-IS-1", "Iceland 1", "Iceland", s3_api=True, cuda_versions=("12.8", "13.1")),
    DataCenter("CA-MTL-1", "Montreal 1", "Canada", s3_api=False, cuda_versions=("12.8", "13.0")),
)
DATACENTER_BY_ID = {dc.id: dc for dc in DATACENTERS}

GPU_TYPES: tuple[GpuType, ...] = (
    GpuType(
        "NVIDIA A100 80GB PCIe",
        "A100 PCIe",
        80,
        Decimal("1.64"),
        Decimal("1.19"),
        6912,
        {"EU-RO-1": "High", "US-KS-2": "Medium", "CA-MTL-1": "Low"},
    ),
    GpuType(
        "NVIDIA GeForce RTX 4090",
        "RTX 4090",
        24,
        Decimal("0.60"),
        Decimal("0.34"),
        16384,
        {"EU-RO-1": "High", "US-KS-2": "High", "EUR-IS-1": "Medium", "CA-MTL-1": "Medium"},
    ),
    GpuType(
        "NVIDIA L40S",
        "L40S",
        48,
        Decimal("0.86"),
        Decimal("0.79"),
        18176,
        {"EU-RO-1": "Medium", "US-KS-2": "Low"},
    ),
    GpuType(
        "NVIDIA H100 80GB HBM3",
        "H100 SXM",
        80,
        Decimal("2.69"),
        None,
        16896,
        {"EU-RO-1": "None", "US-KS-2": "Low", "EUR-IS-1": "Medium"},
    ),
    GpuType(
        "NVIDIA RTX A6000",
        "RTX A6000",
        48,
        Decimal("0.49"),
        Decimal("0.33"),
        10752,
        {"EU-RO-1": "High", "CA-MTL-1": "High"},
    ),
    GpuType(
        "NVIDIA A40",
        "A40",
        48,
        Decimal("0.40"),
        None,
        10752,
        {"CA-MTL-1": "High", "US-KS-2": "Medium"},
    ),
    GpuType(
        "NVIDIA RTX A5000",
        "RTX A5000",
        24,
        Decimal("0.27"),
        Decimal("0.16"),
        8192,
        {"CA-MTL-1": "High", "EUR-IS-1": "High"},
    ),
    # A 2026-07 public report found no H200 host on the CUDA 13 driver (RUNPOD_FACTS appendix
    # B); here EU-RO-1's H200 hosts are all 12.8 while US-KS-2's are 13.0 (inference).
    GpuType(
        "NVIDIA H200",
        "H200 SXM",
        141,
        Decimal("3.59"),
        None,
        16896,
        {"EU-RO-1": "Medium", "US-KS-2": "Low"},
        host_cuda={"EU-RO-1": ("12.8",)},
    ),
    GpuType(
        "NVIDIA RTX A4000",
        "RTX A4000",
        16,
        Decimal("0.25"),
        Decimal("0.17"),
        6144,
        {"EU-RO-1": "Low", "CA-MTL-1": "Medium", "EUR-IS-1": "Low"},
    ),
    GpuType("Tesla T4", "Tesla T4", 16, Decimal("0.20"), None, 2560, {"EU-RO-1": "Medium"}),
    GpuType(
        "Tesla V100-PCIE-16GB", "V100 PCIe", 16, Decimal("0.30"), None, 5120, {"CA-MTL-1": "Low"}
    ),
)
GPU_BY_ID = {g.id: g for g in GPU_TYPES}


def host_cuda_versions(datacenter_id: str, gpu: GpuType | None = None) -> tuple[str, ...]:
    """The CUDA versions of the hosts in `datacenter_id` (with `gpu`'s GPUs, when given)."""
    if gpu is not None and datacenter_id in gpu.host_cuda:
        return gpu.host_cuda[datacenter_id]
    dc = DATACENTER_BY_ID.get(datacenter_id)
    return dc.cuda_versions if dc else ()


def cuda_at_least(version: str, minimum: str) -> bool:
    return tuple(int(p) for p in version.split(".")) >= tuple(int(p) for p in minimum.split("."))


# RunPod's catalog also lists a placeholder GPU type `unknown` that no Pod can be placed on
# (inference: its fields besides the id and name are not documented; served as Secure Cloud so a
# client that forgets to skip it shows it).
PLACEHOLDER_GPU_ID = "unknown"

# How many GPUs of one type a single machine can give, by stock level (inference).
AVAILABLE_COUNTS = {"High": [1, 2, 4, 8], "Medium": [1, 2, 4], "Low": [1], "None": []}

SEED_VOLUMES: tuple[SeedVolume, ...] = (
    SeedVolume("nv7eu1ro4k", "tensorant-eu-ro-1", 100, "EU-RO-1"),
    SeedVolume("nv2usks8m3", "tensorant-us-ks-2", 50, "US-KS-2"),
    SeedVolume("nv5camtl9p", "legacy-ca-mtl-1", 20, "CA-MTL-1"),
)

# CPU pods (deployCpuPod) are billed at a flat rate per vCPU-set (inference; no source gives one).
CPU_POD_PRICE = Decimal("0.06")


def s3_endpoint_template(base_url: str) -> str:
    """Per-datacenter endpoint, path-style, like https://s3api-<dc lower>.runpod.io/ (S3 docs)."""
    return f"{base_url}{S3_MOUNT}/{{dc}}"


def s3_endpoint_for(base_url: str, datacenter_id: str) -> str:
    return s3_endpoint_template(base_url).format(dc=datacenter_id.lower())


def seeded_credentials(port: int = 8181, host: str = "127.0.0.1") -> dict[str, Any]:
    """The JSON of `tensorant sandbox credentials`: what the account holds, without a server."""
    base = f"http://{host}:{port}"
    first_s3 = next(v for v in SEED_VOLUMES if DATACENTER_BY_ID[v.datacenter_id].s3_api)
    return {
        "api_base_url": base,
        "api_key": API_KEY,
        "read_only_api_key": READ_ONLY_API_KEY,
        "account_id": ACCOUNT_ID,
        "s3_endpoint_url": s3_endpoint_for(base, first_s3.datacenter_id),
        "s3_endpoint_template": s3_endpoint_template(base),
        "s3_access_key_id": S3_ACCESS_KEY_ID,
        "s3_secret_access_key": S3_SECRET_ACCESS_KEY,
        "volumes": [
            {
                "id": v.id,
                "name": v.name,
                "size": v.size_gb,
                "dataCenterId": v.datacenter_id,
                "s3_api": DATACENTER_BY_ID[v.datacenter_id].s3_api,
                "s3_endpoint_url": (
                    s3_endpoint_for(base, v.datacenter_id)
                    if DATACENTER_BY_ID[v.datacenter_id].s3_api
                    else None
                ),
            }
            for v in SEED_VOLUMES
        ],
        "hub_url": base + HUB_MOUNT,
        "hf_token": HUB_TOKEN,
        "hf_token_restricted": HUB_RESTRICTED_TOKEN,
        "custom_s3": {
            # Served by the same S3 front under its own "datacenter" path and key pair.
            "endpoint_url": s3_endpoint_for(base, CUSTOM_S3_REGION),
            "bucket": CUSTOM_S3_BUCKET,
            "region": CUSTOM_S3_REGION,
            "access_key_id": CUSTOM_S3_ACCESS_KEY_ID,
            "secret_access_key": CUSTOM_S3_SECRET_ACCESS_KEY,
        },
    }
