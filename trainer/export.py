"""The adapter's export (T1): PEFT's own files plus `tensorant.json`, in a zip a control plane
can check without torch (R7): stored (not deflated: F32 barely compresses and deflate is slow),
fixed timestamps, no pickles. Written to the recovery path first, then to the adapter's object
key (a hard link on the volume, or the presigned PUT for custom S3)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from trainer import transfer
from trainer.errors import TrainerFailure
from trainer.mailbox import fsync_dir
from trainer.protocol import FailureReason, Manifest
from trainer.settings import Settings

MEMBERS = ("adapter_config.json", "adapter_model.safetensors", "tensorant.json")
ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def save_adapter(model: Any, folder: Path, base_model: str) -> None:
    """PEFT's save_pretrained, naming the run's base model (not the local snapshot path)."""
    for config in model.peft_config.values():
        config.base_model_name_or_path = base_model
    # save_embedding_layers=False: "auto" looks the base model up on the Hub (a network call).
    model.save_pretrained(str(folder), safe_serialization=True, save_embedding_layers=False)
    (folder / "README.md").unlink(missing_ok=True)
    # PEFT writes target_modules in set order, which changes from process to process; sorted,
    # the same weights always give the same adapter.zip bytes.
    path = folder / "adapter_config.json"
    config = json.loads(path.read_text())
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def write_zip(folder: Path, metrics: dict[str, Any], dest: Path) -> tuple[str, int]:
    """Build adapter.zip at `dest` (temp name, fsync, rename); (sha256, size)."""
    (folder / "tensorant.json").write_text(json.dumps(metrics, indent=1, sort_keys=True))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_STORED) as z:
        for name in MEMBERS:
            info = zipfile.ZipInfo(name, date_time=ZIP_TIME)
            info.compress_type = zipfile.ZIP_STORED
            info.external_attr = 0o644 << 16
            info.file_size = (folder / name).stat().st_size
            with (folder / name).open("rb") as src, z.open(info, "w", force_zip64=True) as out:
                shutil.copyfileobj(src, out, 1 << 20)
    digest = hashlib.sha256()
    with tmp.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
        os.fsync(f.fileno())
    size = tmp.stat().st_size
    os.replace(tmp, dest)
    fsync_dir(dest.parent)
    return digest.hexdigest(), size


def _place_on_volume(source: Path, dest: Path) -> None:
    if dest.exists() and os.path.samefile(source, dest):
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)  # same volume: instant, within any stop grace period
    except OSError:
        shutil.copyfile(source, tmp)
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
    os.replace(tmp, dest)
    fsync_dir(dest.parent)


def export_adapter(
    model: Any, settings: Settings, manifest: Manifest, metrics: dict[str, Any]
) -> tuple[str, int]:
    """Write adapter.zip to the recovery path and the adapter object; (sha256, size)."""
    try:
        recovery = settings.on_volume(manifest.recovery_path)
        with tempfile.TemporaryDirectory(dir=settings.container_disk) as tmp:
            folder = Path(tmp)
            save_adapter(model, folder, manifest.base_model.name)
            sha256, size = write_zip(folder, metrics, recovery)
        if manifest.adapter.upload_url:
            transfer.put_file(manifest.adapter.upload_url, recovery)
        else:
            _place_on_volume(recovery, settings.object_path(manifest.adapter.object_key))
    except (OSError, ValueError) as e:
        raise TrainerFailure(FailureReason.EXPORT_FAILED, f"{type(e).__name__}: {e}") from None
    return sha256, size
