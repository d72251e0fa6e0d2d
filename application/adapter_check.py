"""R7: what makes an exported adapter acceptable (exists, size and sha256 match, readable zip)."""

from __future__ import annotations

import hashlib
import io
import zipfile

REQUIRED_CONFIG = "adapter_config.json"
WEIGHT_FILES = ("adapter_model.safetensors", "adapter_model.bin")


def inspect_adapter(  # noqa: PLR0911 - one return per way an adapter can be bad
    data: bytes, sha256: str | None, size_bytes: int | None
) -> tuple[str, str] | None:
    """None when the adapter passes; else (reason code, detail)."""
    if size_bytes is not None and len(data) != size_bytes:
        return "adapter_invalid", f"size is {len(data)} bytes, the trainer reported {size_bytes}"
    digest = hashlib.sha256(data).hexdigest()
    if sha256 is not None and digest != sha256:
        return "adapter_invalid", f"sha256 is {digest}, the trainer reported {sha256}"
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as z:
            names = set(z.namelist())
            bad = z.testzip()
    except zipfile.BadZipFile:
        return "adapter_invalid", "adapter.zip is not a readable zip archive"
    if bad is not None:
        return "adapter_invalid", f"adapter.zip member {bad} is corrupt"
    if not any(n.endswith(REQUIRED_CONFIG) for n in names):
        return "adapter_invalid", f"adapter.zip has no {REQUIRED_CONFIG}"
    if not any(n.endswith(w) for n in names for w in WEIGHT_FILES):
        return "adapter_invalid", "adapter.zip has no adapter weights (adapter_model.safetensors)"
    return None
