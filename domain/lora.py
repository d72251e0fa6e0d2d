"""R7: what a LoRA adapter for a base model must be, checked in the control plane without torch.

`verify_adapter` reads adapter.zip from a seekable binary file in bounded memory and never
extracts it. Each defect has its own stable reason code (`AdapterDefect`). The architecture
numbers (hidden, intermediate, layers, q/kv projection widths) come from a model's config.json,
so a base model on the organization's storage is checked as strictly as a catalogue one.
"""

from __future__ import annotations

import hashlib
import json
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

from domain.lora_files import (
    DEFLATED,
    STORED,
    ByteReader,
    FileDefect,
    TensorInfo,
    all_finite,
    all_zero,
    member_chunks,
    parse_safetensors_header,
    zip_directory,
)

CONFIG, WEIGHTS, METRICS, README = (
    "adapter_config.json",
    "adapter_model.safetensors",
    "tensorant.json",
    "README.md",
)
REQUIRED_MEMBERS = (CONFIG, WEIGHTS)
ALLOWED_MEMBERS = frozenset({CONFIG, WEIGHTS, METRICS, README})
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
ATTENTION = ("q_proj", "k_proj", "v_proj", "o_proj")
MLP = ("gate_proj", "up_proj", "down_proj")
LORA_MODULES = ATTENTION + MLP
MAX_R = 256
MAX_ALPHA = 4096
SMALL_MEMBER_BYTES = 1 << 20  # adapter_config.json, tensorant.json, README.md
ZIP_OVERHEAD_BYTES = 1 << 20
MAX_DIRECTORY_BYTES = 64 * 1024  # four entries need a few hundred bytes
_KEY = re.compile(
    r"^base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\."
    r"(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.lora_([AB])\.weight$"
)


class AdapterDefect:
    """Stable reason codes, one per rule an adapter can break."""

    SIZE_MISMATCH = "adapter_size_mismatch"
    SHA256_MISMATCH = "adapter_sha256_mismatch"
    TOO_LARGE = "adapter_too_large"
    NOT_ZIP = "adapter_not_zip"
    ZIP_TOO_MANY_MEMBERS = "adapter_zip_too_many_members"
    ZIP_PATH_UNSAFE = "adapter_zip_path_unsafe"
    ZIP_PICKLE_MEMBER = "adapter_zip_pickle_member"
    ZIP_UNEXPECTED_MEMBER = "adapter_zip_unexpected_member"
    ZIP_MEMBER_MISSING = "adapter_zip_member_missing"
    ZIP_TOO_LARGE = "adapter_zip_too_large"
    ZIP_EXPANSION_EXCEEDS_DECLARED = "adapter_zip_expansion_exceeds_declared"
    ZIP_CORRUPT = "adapter_zip_corrupt"
    ZIP_UNSUPPORTED = "adapter_zip_unsupported"
    CONFIG_INVALID = "adapter_config_invalid"
    NOT_LORA = "adapter_not_lora"
    WRONG_BASE_MODEL = "adapter_wrong_base_model"
    RANK_OUT_OF_BOUNDS = "adapter_rank_out_of_bounds"
    ALPHA_OUT_OF_BOUNDS = "adapter_alpha_out_of_bounds"
    TARGET_MODULES_INVALID = "adapter_target_modules_invalid"
    UNSUPPORTED_OPTIONS = "adapter_unsupported_options"
    METRICS_INVALID = "adapter_metrics_invalid"
    SAFETENSORS_TRUNCATED = "adapter_safetensors_truncated"
    SAFETENSORS_INVALID = "adapter_safetensors_invalid"
    DTYPE_UNSUPPORTED = "adapter_dtype_unsupported"
    EMBEDDING_TENSOR = "adapter_embedding_tensor"
    TENSOR_UNEXPECTED = "adapter_tensor_unexpected"
    TENSOR_MISSING = "adapter_tensor_missing"
    SHAPE_MISMATCH = "adapter_shape_mismatch"
    NON_FINITE = "adapter_non_finite"
    UNTRAINED = "adapter_untrained"


ADAPTER_DEFECTS = frozenset(
    v for k, v in vars(AdapterDefect).items() if k.isupper() and isinstance(v, str)
)


class AdapterRejected(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Architecture:
    """The numbers of a decoder-only model that fix every LoRA tensor's shape."""

    model_type: str
    hidden_size: int
    intermediate_size: int
    num_layers: int
    q_out: int  # attention heads × head_dim (differs from hidden_size in Gemma 2)
    kv_out: int  # key/value heads × head_dim

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Architecture:
        """From a Hugging Face config.json (Llama, Qwen2, Mistral, Gemma 2 and alike)."""
        try:
            hidden = int(config["hidden_size"])
            heads = int(config["num_attention_heads"])
            kv_heads = int(config.get("num_key_value_heads") or heads)
            head_dim = int(config.get("head_dim") or hidden // heads)
            arch = cls(
                model_type=str(config.get("model_type", "")),
                hidden_size=hidden,
                intermediate_size=int(config["intermediate_size"]),
                num_layers=int(config["num_hidden_layers"]),
                q_out=heads * head_dim,
                kv_out=kv_heads * head_dim,
            )
        except (KeyError, TypeError, ValueError, ZeroDivisionError) as e:
            raise ValueError(f"config.json lacks a decoder's dimensions: {e}") from None
        # heads, key/value heads and head_dim too: two negative factors make a positive width
        dimensions = (heads, kv_heads, head_dim)
        if (
            min(arch.hidden_size, arch.intermediate_size, arch.num_layers, arch.q_out, arch.kv_out)
            < 1
            or min(dimensions) < 1
        ):
            raise ValueError("config.json has a non-positive dimension")
        return arch

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

    def lora_parameters(self, r: int, modules: tuple[str, ...] = LORA_MODULES) -> int:
        return self.num_layers * r * sum(sum(self.shape(m)) for m in modules)

    def max_weights_bytes(self, r: int = MAX_R) -> int:
        """The largest adapter_model.safetensors an adapter of rank <= r can be (F32)."""
        tensors = self.num_layers * len(LORA_MODULES) * 2
        return self.lora_parameters(r) * 4 + 8 + 256 * tensors + 4096

    def max_zip_bytes(self) -> int:
        return self.max_weights_bytes() + 3 * SMALL_MEMBER_BYTES + ZIP_OVERHEAD_BYTES


def _arch(
    model_type: str, hidden: int, inter: int, layers: int, heads: int, kv: int, head_dim: int
) -> Architecture:
    return Architecture(model_type, hidden, inter, layers, heads * head_dim, kv * head_dim)


# The catalogue's base models (P2), from each model's config.json on the Hugging Face Hub.
# r=16 over all seven projections gives 8.8 M (Qwen2.5-0.5B) to 207 M (Llama-3.3-70B) parameters.
CATALOGUE_ARCHITECTURES: dict[str, Architecture] = {
    "Qwen/Qwen2.5-0.5B-Instruct": _arch("qwen2", 896, 4864, 24, 14, 2, 64),
    "Qwen/Qwen2.5-7B-Instruct": _arch("qwen2", 3584, 18944, 28, 28, 4, 128),
    "meta-llama/Llama-3.2-3B-Instruct": _arch("llama", 3072, 8192, 28, 24, 8, 128),
    "meta-llama/Llama-3.1-8B-Instruct": _arch("llama", 4096, 14336, 32, 32, 8, 128),
    "mistralai/Mistral-7B-Instruct-v0.3": _arch("mistral", 4096, 14336, 32, 32, 8, 128),
    "google/gemma-2-27b-it": _arch("gemma2", 4608, 36864, 46, 32, 16, 128),
    "meta-llama/Llama-3.3-70B-Instruct": _arch("llama", 8192, 28672, 80, 64, 8, 128),
}


@dataclass(frozen=True)
class AdapterSummary:
    r: int
    lora_alpha: float
    target_modules: tuple[str, ...]
    dtype: str
    tensors: int
    parameters: int
    size_bytes: int
    sha256: str
    metrics: dict[str, Any] | None  # tensorant.json, when present (e.g. {"partial": true, ...})


def verify_adapter(
    stream: BinaryIO,
    *,
    base_model: str,
    architecture: Architecture,
    sha256: str | None = None,
    size_bytes: int | None = None,
) -> AdapterSummary:
    """The adapter's summary, or AdapterRejected with the first rule it breaks."""
    try:
        return _Verifier(stream, base_model, architecture).run(sha256, size_bytes)
    except FileDefect as e:
        raise AdapterRejected(e.reason, e.detail) from None


def check_adapter(
    stream: BinaryIO,
    *,
    base_model: str,
    architecture: Architecture,
    sha256: str | None = None,
    size_bytes: int | None = None,
) -> tuple[str, str] | None:
    """None when the adapter passes; else (reason code, detail)."""
    try:
        verify_adapter(
            stream,
            base_model=base_model,
            architecture=architecture,
            sha256=sha256,
            size_bytes=size_bytes,
        )
    except AdapterRejected as e:
        return e.reason, e.detail
    return None


def _reject(reason: str, detail: str) -> AdapterRejected:
    return AdapterRejected(reason, detail)


class _Verifier:
    def __init__(self, stream: BinaryIO, base_model: str, arch: Architecture) -> None:
        self.stream = stream
        self.base_model = base_model
        self.arch = arch

    def run(self, sha256: str | None, size_bytes: int | None) -> AdapterSummary:
        size = self.stream.seek(0, 2)
        if size_bytes is not None and size != size_bytes:
            raise _reject(AdapterDefect.SIZE_MISMATCH, f"{size} bytes, reported {size_bytes}")
        if size > self.arch.max_zip_bytes():
            raise _reject(AdapterDefect.TOO_LARGE, f"{size} bytes is more than this model allows")
        digest = self._sha256()
        if sha256 is not None and digest != sha256.lower():
            raise _reject(AdapterDefect.SHA256_MISMATCH, f"sha256 is {digest}, reported {sha256}")
        members = self._members(size)
        config = self._config(members[CONFIG])
        metrics = self._metrics(members.get(METRICS))
        dtype, tensors = self._weights(members[WEIGHTS], config)
        return AdapterSummary(
            r=config["r"],
            lora_alpha=float(config["lora_alpha"]),
            target_modules=tuple(config["target_modules"]),
            dtype=dtype,
            tensors=tensors,
            parameters=self.arch.lora_parameters(config["r"], tuple(config["target_modules"])),
            size_bytes=size,
            sha256=digest,
            metrics=metrics,
        )

    def _sha256(self) -> str:
        h = hashlib.sha256()
        self.stream.seek(0)
        while chunk := self.stream.read(1 << 20):
            h.update(chunk)
        return h.hexdigest()

    # ------------------------------------------------------------------ the zip

    def _members(self, size: int) -> dict[str, zipfile.ZipInfo]:
        directory = zip_directory(self.stream, size)
        if directory is None:
            raise _reject(AdapterDefect.NOT_ZIP, "no zip end-of-directory record")
        count, directory_bytes = directory
        if count > len(ALLOWED_MEMBERS):
            raise _reject(AdapterDefect.ZIP_TOO_MANY_MEMBERS, f"{count} members")
        if directory_bytes > MAX_DIRECTORY_BYTES:
            raise _reject(AdapterDefect.ZIP_CORRUPT, f"a {directory_bytes}-byte directory")
        try:
            infos = zipfile.ZipFile(self.stream).infolist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
            raise _reject(AdapterDefect.NOT_ZIP, str(e)) from None
        members: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            name = info.filename
            parts = re.split(r"[/\\]", name)
            if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name) or ".." in parts:
                raise _reject(AdapterDefect.ZIP_PATH_UNSAFE, f"member {name!r} escapes the folder")
            if name.lower().endswith(PICKLE_SUFFIXES):
                raise _reject(AdapterDefect.ZIP_PICKLE_MEMBER, f"member {name!r} is a pickle")
            if name not in ALLOWED_MEMBERS or name in members:
                raise _reject(AdapterDefect.ZIP_UNEXPECTED_MEMBER, f"member {name!r}")
            if info.flag_bits & 0x1 or info.compress_type not in (STORED, DEFLATED):
                raise _reject(AdapterDefect.ZIP_UNSUPPORTED, f"{name}: encrypted or unknown method")
            members[name] = info
        for name in REQUIRED_MEMBERS:
            if name not in members:
                raise _reject(AdapterDefect.ZIP_MEMBER_MISSING, f"no {name}")
        declared = sum(i.file_size for i in members.values())
        small = max((i.file_size for n, i in members.items() if n != WEIGHTS), default=0)
        weights = members[WEIGHTS].file_size
        if (
            declared > self.arch.max_zip_bytes()
            or small > SMALL_MEMBER_BYTES
            or (weights > self.arch.max_weights_bytes())
        ):
            raise _reject(AdapterDefect.ZIP_TOO_LARGE, f"members declare {declared} bytes")
        return members

    def _chunks(self, info: zipfile.ZipInfo) -> Any:
        return member_chunks(
            self.stream,
            name=info.filename,
            header_offset=info.header_offset,
            compress_type=info.compress_type,
            compress_size=info.compress_size,
            file_size=info.file_size,
            crc=info.CRC,
        )

    def _small_json(self, info: zipfile.ZipInfo, defect: str) -> Any:
        data = b"".join(self._chunks(info))
        try:
            return json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):  # nested past the parser
            raise _reject(defect, f"{info.filename} is not JSON") from None

    # ------------------------------------------------------------------ adapter_config.json

    def _config(self, info: zipfile.ZipInfo) -> dict[str, Any]:
        c = self._small_json(info, AdapterDefect.CONFIG_INVALID)
        if not isinstance(c, dict):
            raise _reject(AdapterDefect.CONFIG_INVALID, "adapter_config.json is not an object")
        if c.get("peft_type") != "LORA" or c.get("task_type") != "CAUSAL_LM":
            raise _reject(
                AdapterDefect.NOT_LORA,
                f"peft_type {c.get('peft_type')!r}, task_type {c.get('task_type')!r}",
            )
        made_for = c.get("base_model_name_or_path")
        if made_for != self.base_model:
            raise _reject(
                AdapterDefect.WRONG_BASE_MODEL,
                f"made for {made_for!r}, the run trains {self.base_model!r}",
            )
        r = c.get("r")
        if not isinstance(r, int) or isinstance(r, bool) or not 1 <= r <= MAX_R:
            raise _reject(AdapterDefect.RANK_OUT_OF_BOUNDS, f"r={r!r} (1..{MAX_R})")
        alpha = c.get("lora_alpha")
        if (
            not isinstance(alpha, int | float)
            or isinstance(alpha, bool)
            or not 0 < alpha <= MAX_ALPHA
        ):
            raise _reject(AdapterDefect.ALPHA_OUT_OF_BOUNDS, f"lora_alpha={alpha!r}")
        modules = c.get("target_modules")
        if (
            not isinstance(modules, list)
            or not modules
            or len(set(modules)) != len(modules)
            or not set(modules) <= set(LORA_MODULES)
        ):
            raise _reject(
                AdapterDefect.TARGET_MODULES_INVALID,
                f"target_modules={modules!r} (a list of {', '.join(LORA_MODULES)})",
            )
        unsupported = [
            k
            for k in (
                "use_dora",
                "modules_to_save",
                "rank_pattern",
                "alpha_pattern",
                "layers_to_transform",
            )
            if c.get(k)
        ]
        if c.get("bias", "none") != "none":
            unsupported.append("bias")
        if unsupported:
            raise _reject(AdapterDefect.UNSUPPORTED_OPTIONS, f"set: {', '.join(unsupported)}")
        c["target_modules"] = [m for m in LORA_MODULES if m in modules]
        return c

    def _metrics(self, info: zipfile.ZipInfo | None) -> dict[str, Any] | None:
        if info is None:
            return None
        metrics = self._small_json(info, AdapterDefect.METRICS_INVALID)
        if not isinstance(metrics, dict):
            raise _reject(AdapterDefect.METRICS_INVALID, "tensorant.json is not an object")
        return metrics

    # ------------------------------------------------------------------ adapter_model.safetensors

    def _expected(self, r: int, modules: list[str]) -> dict[str, tuple[int, int]]:
        out: dict[str, tuple[int, int]] = {}
        for layer in range(self.arch.num_layers):
            for m in modules:
                group = "self_attn" if m in ATTENTION else "mlp"
                stem = f"base_model.model.model.layers.{layer}.{group}.{m}"
                fan_in, fan_out = self.arch.shape(m)
                out[f"{stem}.lora_A.weight"] = (r, fan_in)
                out[f"{stem}.lora_B.weight"] = (fan_out, r)
        return out

    def _check_names(self, tensors: list[TensorInfo], config: dict[str, Any]) -> None:
        expected = self._expected(config["r"], config["target_modules"])
        for t in tensors:
            if "embed_tokens" in t.name or "lm_head" in t.name:
                raise _reject(AdapterDefect.EMBEDDING_TENSOR, f"{t.name} (a vocabulary change)")
            if not _KEY.match(t.name) or t.name not in expected:
                raise _reject(AdapterDefect.TENSOR_UNEXPECTED, t.name)
            if t.shape != expected[t.name]:
                raise _reject(
                    AdapterDefect.SHAPE_MISMATCH,
                    f"{t.name} is {list(t.shape)}, r={config['r']} on {self.arch.model_type} "
                    f"needs {list(expected[t.name])}",
                )
        missing = sorted(set(expected) - {t.name for t in tensors})
        if missing:
            raise _reject(
                AdapterDefect.TENSOR_MISSING, f"{len(missing)} missing, e.g. {missing[0]}"
            )

    def _weights(self, info: zipfile.ZipInfo, config: dict[str, Any]) -> tuple[str, int]:
        reader = ByteReader(iter(self._chunks(info)))
        max_header = 4096 + 512 * len(self._expected(config["r"], config["target_modules"]))
        tensors = parse_safetensors_header(reader, info.file_size, max_header)
        self._check_names(tensors, config)
        trained = False
        for t in tensors:
            is_b = ".lora_B." in t.name
            for piece in reader.pieces(t.end - t.begin):
                if not all_finite(piece, t.dtype):
                    raise _reject(AdapterDefect.NON_FINITE, f"{t.name} holds NaN or infinity")
                if is_b and not trained:
                    trained = not all_zero(piece, t.dtype)
        for _ in iter(lambda: reader.read(1 << 20), b""):
            pass  # drain the member, so its size and CRC are checked too
        if not trained:
            raise _reject(AdapterDefect.UNTRAINED, "every lora_B is all zeros (never trained)")
        dtypes = sorted({t.dtype for t in tensors})
        return "+".join(dtypes), len(tensors)
