"""A valid PEFT LoRA adapter.zip built by hand (no torch, no numpy), for the simulated trainer.

The shapes follow the base model's architecture: `lora_A` [r, in] and `lora_B` [out, r] for every
targeted projection of every decoder layer, as PEFT names them. The numbers are those of the
catalogue's config.json files (the control plane keeps its own copy; the sandbox imports nothing
of ours), or come from a `config.json` next to a model on storage.
"""

from __future__ import annotations

import functools
import io
import json
import struct
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
LORA_MODULES = ATTENTION + MLP
DEFAULT_R = 8
DEFAULT_ALPHA = 16
DEFAULT_TARGETS = ("q_proj", "v_proj")


@dataclass(frozen=True)
class Architecture:
    model_type: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    q_out: int
    kv_out: int

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Architecture:
        hidden = int(config["hidden_size"])
        heads = int(config["num_attention_heads"])
        kv_heads = int(config.get("num_key_value_heads") or heads)
        head_dim = int(config.get("head_dim") or hidden // heads)
        return cls(
            str(config.get("model_type", "")),
            hidden,
            int(config["intermediate_size"]),
            int(config["num_hidden_layers"]),
            heads * head_dim,
            kv_heads * head_dim,
        )

    def shape(self, module: str) -> tuple[int, int]:
        """(in_features, out_features) of a projection."""
        h, i = self.hidden_size, self.intermediate_size
        return {
            "q_proj": (h, self.q_out),
            "k_proj": (h, self.kv_out),
            "v_proj": (h, self.kv_out),
            "o_proj": (self.q_out, h),
            "gate_proj": (h, i),
            "up_proj": (h, i),
            "down_proj": (i, h),
        }[module]


def _arch(
    model_type: str, hidden: int, inter: int, layers: int, heads: int, kv: int, head_dim: int
) -> Architecture:
    return Architecture(model_type, hidden, inter, layers, heads * head_dim, kv * head_dim)


CATALOGUE: dict[str, Architecture] = {
    "Qwen/Qwen2.5-0.5B-Instruct": _arch("qwen2", 896, 4864, 24, 14, 2, 64),
    "Qwen/Qwen2.5-7B-Instruct": _arch("qwen2", 3584, 18944, 28, 28, 4, 128),
    "meta-llama/Llama-3.2-3B-Instruct": _arch("llama", 3072, 8192, 28, 24, 8, 128),
    "meta-llama/Llama-3.1-8B-Instruct": _arch("llama", 4096, 14336, 32, 32, 8, 128),
    "mistralai/Mistral-7B-Instruct-v0.3": _arch("mistral", 4096, 14336, 32, 32, 8, 128),
    "google/gemma-2-27b-it": _arch("gemma2", 4608, 36864, 46, 32, 16, 128),
    "meta-llama/Llama-3.3-70B-Instruct": _arch("llama", 8192, 28672, 80, 64, 8, 128),
}
# A model nobody described: a small Llama shape (verification of such a run is expected to fail).
FALLBACK = _arch("llama", 64, 128, 2, 4, 2, 16)

_BF16_A = struct.pack("<H", 0x3C23)  # 0.00995...: lora_A (small, finite)
_BF16_B = struct.pack("<H", 0x3A83)  # 0.000999...: lora_B (not zero: a trained adapter)


def safetensors_bytes(
    tensors: list[tuple[str, tuple[int, int], bytes]], meta: dict[str, str]
) -> bytes:
    """safetensors: 8-byte little-endian header length, the JSON header, then the data."""
    header: dict[str, Any] = {"__metadata__": meta}
    offset = 0
    for name, shape, data in tensors:
        header[name] = {
            "dtype": "BF16",
            "shape": list(shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # aligned data, as the safetensors library writes it
    return struct.pack("<Q", len(raw)) + raw + b"".join(data for _, _, data in tensors)


def lora_tensors(
    arch: Architecture, r: int, targets: tuple[str, ...]
) -> list[tuple[str, tuple[int, int], bytes]]:
    return list(_lora_tensors(arch, r, tuple(targets)))


@functools.lru_cache(maxsize=32)
def _lora_tensors(
    arch: Architecture, r: int, targets: tuple[str, ...]
) -> tuple[tuple[str, tuple[int, int], bytes], ...]:
    """Made once per shape: a thousand simulated exports each making megabytes of the same
    tensors were half of the sandbox's CPU (bench/scale.py)."""
    out: list[tuple[str, tuple[int, int], bytes]] = []
    for layer in range(arch.num_layers):
        for module in (m for m in LORA_MODULES if m in targets):
            group = "self_attn" if module in ATTENTION else "mlp"
            stem = f"base_model.model.model.layers.{layer}.{group}.{module}"
            fan_in, fan_out = arch.shape(module)
            out.append((f"{stem}.lora_A.weight", (r, fan_in), _BF16_A * (r * fan_in)))
            out.append((f"{stem}.lora_B.weight", (fan_out, r), _BF16_B * (fan_out * r)))
    return tuple(out)


def build_adapter_zip(
    run_id: str,
    base_model: str,
    *,
    arch: Architecture | None = None,
    r: int = DEFAULT_R,
    lora_alpha: float = DEFAULT_ALPHA,
    targets: tuple[str, ...] = DEFAULT_TARGETS,
    metrics: dict[str, Any] | None = None,
) -> bytes:
    """adapter_config.json + adapter_model.safetensors (+ tensorant.json); byte-stable per run."""
    arch = arch or CATALOGUE.get(base_model, FALLBACK)
    targets = tuple(m for m in LORA_MODULES if m in targets) or DEFAULT_TARGETS
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": r,
        "lora_alpha": lora_alpha,
        "lora_dropout": 0.05,
        "target_modules": list(targets),
        "bias": "none",
        "inference_mode": True,
    }
    weights = safetensors_bytes(
        lora_tensors(arch, r, targets), {"format": "pt", "tensorant_run_id": run_id}
    )
    members: list[tuple[str, bytes]] = [
        ("adapter_config.json", json.dumps(config, indent=2).encode()),
        ("adapter_model.safetensors", weights),
    ]
    if metrics is not None:
        members.append(("tensorant.json", json.dumps(metrics, sort_keys=True).encode()))
    buf = io.BytesIO()
    # A fixed timestamp makes the same run's adapter byte-identical (stable sha256).
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data, compresslevel=1)
    return buf.getvalue()
