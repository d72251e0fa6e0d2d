"""LoRA adapters built byte by byte (no torch): a valid one for any catalogue base model, and
copies that each break one rule of R7 (domain/lora.py), for the service and e2e tests."""

from __future__ import annotations

import io
import json
import random
import struct
import zipfile
import zlib
from collections.abc import Callable

from domain.lora import CATALOGUE_ARCHITECTURES, AdapterDefect, Architecture

QWEN_7B = "Qwen/Qwen2.5-7B-Instruct"  # the tests' model: open (not gated), 24 GB
Tensors = dict[str, tuple[str, list[int], bytes]]
Members = list[tuple[str, bytes]]


def _f32(count: int, rng: random.Random, scale: float) -> bytes:
    return struct.pack(f"<{count}f", *(rng.uniform(-scale, scale) for _ in range(count)))


def lora_tensors(arch: Architecture, r: int, modules: tuple[str, ...], seed: int = 0) -> Tensors:
    rng = random.Random(seed)
    out: Tensors = {}
    for layer in range(arch.num_layers):
        for m in modules:
            group = "self_attn" if m in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            stem = f"base_model.model.model.layers.{layer}.{group}.{m}"
            fan_in, fan_out = arch.shape(m)
            out[f"{stem}.lora_A.weight"] = ("F32", [r, fan_in], _f32(r * fan_in, rng, 0.05))
            out[f"{stem}.lora_B.weight"] = ("F32", [fan_out, r], _f32(fan_out * r, rng, 0.01))
    return out


def safetensors_of(tensors: Tensors) -> bytes:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    at = 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(raw)]}
        at += len(raw)
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    return struct.pack("<Q", len(blob)) + blob + b"".join(raw for _, _, raw in tensors.values())


def tensors_of(data: bytes) -> Tensors:
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n :]
    return {
        k: (v["dtype"], v["shape"], body[v["data_offsets"][0] : v["data_offsets"][1]])
        for k, v in header.items()
    }


def zip_of(members: Members, method: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in members:
            z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data, compress_type=method)
    return buf.getvalue()


def members_of(data: bytes) -> Members:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [(i.filename, z.read(i)) for i in z.infolist()]


def _config(base_model: str, r: int, modules: tuple[str, ...]) -> dict[str, object]:
    """A PEFT LoRA adapter_config.json for `base_model`."""
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": r,
        "lora_alpha": 2 * r,
        "lora_dropout": 0.0,
        "target_modules": list(modules),
        "bias": "none",
    }


def lora_zip(
    base_model: str = QWEN_7B,
    *,
    r: int = 1,
    modules: tuple[str, ...] = ("q_proj",),
    arch: Architecture | None = None,
    seed: int = 0,
) -> bytes:
    """A valid PEFT LoRA adapter.zip for `base_model` (small: rank 1 on q_proj by default)."""
    arch = arch or CATALOGUE_ARCHITECTURES[base_model]
    return zip_of(
        [
            ("adapter_config.json", json.dumps(_config(base_model, r, modules)).encode()),
            ("adapter_model.safetensors", safetensors_of(lora_tensors(arch, r, modules, seed))),
            ("tensorant.json", json.dumps({"partial": False}).encode()),
        ]
    )


# ---------------------------------------------------------------- one broken rule each


def with_member(data: bytes, name: str, change: Callable[[bytes], bytes]) -> bytes:
    return zip_of([(n, change(d) if n == name else d) for n, d in members_of(data)])


def with_config(data: bytes, **changes: object) -> bytes:
    return with_member(
        data, "adapter_config.json", lambda d: json.dumps(json.loads(d) | changes).encode()
    )


def with_tensors(data: bytes, change: Callable[[Tensors], Tensors]) -> bytes:
    return with_member(
        data, "adapter_model.safetensors", lambda d: safetensors_of(change(tensors_of(d)))
    )


def _without_one_b(t: Tensors) -> Tensors:
    gone = next(k for k in t if k.endswith("lora_B.weight"))
    return {k: v for k, v in t.items() if k != gone}


def _nan_in_one(t: Tensors) -> Tensors:
    name = next(k for k in t if k.endswith("lora_A.weight"))
    dtype, shape, raw = t[name]
    return t | {name: (dtype, shape, raw[:4] + struct.pack("<f", float("nan")) + raw[8:])}


def _raw_zip(name: str, payload: bytes, *, declared: int, crc: int) -> bytes:
    """A one-member deflated zip whose directory declares `declared` bytes, whatever the data."""
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    data = comp.compress(payload) + comp.flush()
    encoded = name.encode()
    head = (20, 0, 8, 0, 0x21, crc, len(data), declared, len(encoded), 0)
    local = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", *head)
    central = struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, *head[:-1], 0, 0, 0, 0, 0, 0)
    offset = len(local) + len(encoded) + len(data)
    end = struct.pack(
        "<4sHHHHIIH", b"PK\x05\x06", 0, 0, 1, 1, len(central) + len(encoded), offset, 0
    )
    return local + encoded + data + central + encoded + end


def _merge(first: bytes, second: bytes) -> bytes:
    """Concatenate two single-member zips into one two-member zip (offsets fixed up)."""

    def split(z: bytes) -> tuple[bytes, bytes]:
        (cd_size, cd_offset) = struct.unpack_from("<II", z, len(z) - 22 + 12)
        return z[:cd_offset], z[cd_offset : cd_offset + cd_size]

    body1, cd1 = split(first)
    body2, cd2 = split(second)
    cd2 = cd2[:42] + struct.pack("<I", struct.unpack_from("<I", cd2, 42)[0] + len(body1)) + cd2[46:]
    cd = cd1 + cd2
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 2, 2, len(cd), len(body1) + len(body2), 0)
    return body1 + body2 + cd + end


def zip_bomb(data: bytes) -> bytes:
    """The weights member inflates to 60 MB more than its header declares."""
    members = dict(members_of(data))
    weights = members["adapter_model.safetensors"]
    bomb = _raw_zip(
        "adapter_model.safetensors",
        weights + bytes(60_000_000),
        declared=len(weights),
        crc=zlib.crc32(weights),
    )
    return _merge(zip_of([("adapter_config.json", members["adapter_config.json"])]), bomb)


# Each bad adapter and the reason code it must be refused with.
BAD_ADAPTERS: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "wrong base model": (
        AdapterDefect.WRONG_BASE_MODEL,
        lambda d: with_config(d, base_model_name_or_path="Qwen/Qwen2.5-0.5B-Instruct"),
    ),
    "a missing lora_B": (AdapterDefect.TENSOR_MISSING, lambda d: with_tensors(d, _without_one_b)),
    "a shape that disagrees with r": (AdapterDefect.SHAPE_MISMATCH, lambda d: with_config(d, r=4)),
    "a NaN": (AdapterDefect.NON_FINITE, lambda d: with_tensors(d, _nan_in_one)),
    "a truncated safetensors": (
        AdapterDefect.SAFETENSORS_TRUNCATED,
        lambda d: with_member(d, "adapter_model.safetensors", lambda t: t[: len(t) * 4 // 5]),
    ),
    "a member with ../": (
        AdapterDefect.ZIP_PATH_UNSAFE,
        lambda d: zip_of([*members_of(d), ("../evil.sh", b"rm -rf /")]),
    ),
    "a zip bomb": (AdapterDefect.ZIP_EXPANSION_EXCEEDS_DECLARED, zip_bomb),
}


def largest_zeros_adapter(base_model: str, r: int = 256) -> bytes:
    """The largest zip bomb the verifier's limits let through to inflation: a LoRA of rank `r`
    on all seven projections whose tensors are all zeros, deflated (so a few MB inflate to the
    largest adapter the base model can have). It is refused at the end (every lora_B is zero),
    after the whole weights member was inflated and checked."""
    from domain.lora import LORA_MODULES

    arch = CATALOGUE_ARCHITECTURES[base_model]
    shapes: list[tuple[str, list[int]]] = []
    for layer in range(arch.num_layers):
        for m in LORA_MODULES:
            group = "self_attn" if m in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
            stem = f"base_model.model.model.layers.{layer}.{group}.{m}"
            fan_in, fan_out = arch.shape(m)
            shapes.append((f"{stem}.lora_A.weight", [r, fan_in]))
            shapes.append((f"{stem}.lora_B.weight", [fan_out, r]))
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    at = 0
    for name, shape in shapes:
        size = shape[0] * shape[1] * 4
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [at, at + size]}
        at += size
    blob = json.dumps(header).encode()
    blob += b" " * (-len(blob) % 8)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("adapter_config.json", json.dumps(_config(base_model, r, LORA_MODULES)))
        with z.open("adapter_model.safetensors", "w", force_zip64=True) as w:
            w.write(struct.pack("<Q", len(blob)) + blob)
            zeros, left = bytes(1 << 22), at
            while left:
                w.write(zeros[: min(left, len(zeros))])
                left -= min(left, len(zeros))
    return buf.getvalue()
