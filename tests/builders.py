"""What tests build again and again: typed commands (a trial's configuration, the fakes'
storage) and an adapter.zip."""

from __future__ import annotations

import io
import zipfile
from decimal import Decimal
from typing import Any

from application.services import Services
from application.storage import BindCustomS3, BindVolume
from domain.run_config import RunConfig
from tests.fakes import S3_ACCESS, S3_SECRET
from tests.lora_builders import QWEN_7B, lora_zip, members_of

A100 = "NVIDIA A100 80GB PCIe"


def trial(project_id: str = "p1", dataset_version_id: str = "d1", **changes: Any) -> RunConfig:
    """A trial of Qwen2.5 7B on one A100 within $2/hour and an hour."""
    values: dict[str, Any] = {
        "project_id": project_id,
        "dataset_version_id": dataset_version_id,
        "kind": "trial",
        "base_model": QWEN_7B,
        "gpu_type_id": A100,
        "gpu_count": 1,
        "price_limit_per_hour": Decimal("2.00"),
        "max_runtime_minutes": 60,
        **changes,
    }
    return RunConfig(**values)


def small_trial(**changes: Any) -> RunConfig:
    """A trial of a small model (Qwen 0.5B) on one RTX 4090 within $1/hour and half an hour."""
    values: dict[str, Any] = {
        "base_model": "Qwen/Qwen2.5-0.5B-Instruct",
        "gpu_type_id": "NVIDIA GeForce RTX 4090",
        "price_limit_per_hour": Decimal("1.00"),
        "max_runtime_minutes": 30,
        **changes,
    }
    return trial(**values)


CHATS = b"".join(
    b'{"messages": [{"role": "user", "content": "Where is my order %d?"}, '
    b'{"role": "assistant", "content": "It ships tomorrow."}]}\n' % i
    for i in range(3)
)


def upload_chats(
    services: Services, org_id: str, project_id: str, actor: str = "owner", version: str = "1"
) -> str:
    """A valid three-row chat dataset uploaded and registered (P1); its dataset version id."""
    dv, _ = services.projects.upload_dataset(
        org_id, project_id, actor, name="chats", version=version, source=io.BytesIO(CHATS)
    )
    return dv


def adapter_zip(ok: bool = True, base_model: str = QWEN_7B) -> bytes:
    """A valid LoRA adapter.zip for `base_model` (R7), or without its weights unless `ok`."""
    data = lora_zip(base_model)
    if ok:
        return data
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("adapter_config.json", dict(members_of(data))["adapter_config.json"])
    return buf.getvalue()


def volume(
    volume_id: str = "vol1euro", datacenter_id: str = "EU-RO-1", **changes: Any
) -> BindVolume:
    """The fakes' S3-speaking network volume, opened by the fakes' key pair."""
    values: dict[str, Any] = {
        "volume_id": volume_id,
        "datacenter_id": datacenter_id,
        "access_key_id": S3_ACCESS,
        "secret_access_key": S3_SECRET,
        **changes,
    }
    return BindVolume(**values)


def custom_s3(bucket: str = "custom-bucket") -> BindCustomS3:
    """The fakes' custom S3 bucket behind a public endpoint."""
    return BindCustomS3("https://s3.example.com", bucket, "us-east-1", S3_ACCESS, S3_SECRET)
