"""R7: an adapter verifies for what it is. A real adapter exported by the trainer on the tiny
model passes; then one test per rule, each with a copy that breaks only that rule."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import zipfile
import zlib
from collections.abc import Callable

import pytest

from domain.lora import (
    ADAPTER_DEFECTS,
    CATALOGUE_ARCHITECTURES,
    AdapterDefect,
    AdapterRejected,
    Architecture,
    check_adapter,
    verify_adapter,
)
from tests.trainer.fixtures import TrainedRun

BASE = "storage:models/tiny"
Members = list[tuple[str, bytes]]


@pytest.fixture(scope="module")
def real(trained_run: TrainedRun) -> bytes:
    return trained_run.workspace.path("data/adapter.zip").read_bytes()


@pytest.fixture(scope="module")
def arch(trained_run: TrainedRun) -> Architecture:
    config = trained_run.workspace.path("models/tiny") / "config.json"
    return Architecture.from_config(json.loads(config.read_text()))


def members_of(data: bytes) -> Members:
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return [(i.filename, z.read(i)) for i in z.infolist()]


def zip_of(members: Members, method: int = zipfile.ZIP_STORED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in members:
            z.writestr(zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0)), data, compress_type=method)
    return buf.getvalue()


# ---------------------------------------------------------------- safetensors, rebuilt by hand

Tensors = dict[str, tuple[str, list[int], bytes]]


def tensors_of(data: bytes) -> Tensors:
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    header.pop("__metadata__", None)
    body = data[8 + n :]
    return {
        k: (v["dtype"], v["shape"], body[v["data_offsets"][0] : v["data_offsets"][1]])
        for k, v in header.items()
    }


def safetensors_of(tensors: Tensors) -> bytes:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    at = 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(raw)]}
        at += len(raw)
    blob = json.dumps(header).encode()
    return struct.pack("<Q", len(blob)) + blob + b"".join(raw for _, _, raw in tensors.values())


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


def _first(tensors: Tensors, suffix: str) -> str:
    return next(k for k in tensors if k.endswith(suffix))


def _without_one_b(t: Tensors) -> Tensors:
    gone = _first(t, "lora_B.weight")
    return {k: v for k, v in t.items() if k != gone}


def _nan_in_one(t: Tensors) -> Tensors:
    name = _first(t, "lora_A.weight")
    dtype, shape, raw = t[name]
    return t | {name: (dtype, shape, raw[:8] + struct.pack("<f", float("nan")) + raw[12:])}


def _zero_every_b(t: Tensors) -> Tensors:
    return {k: (d, s, bytes(len(r)) if ".lora_B." in k else r) for k, (d, s, r) in t.items()}


def _add_lm_head(t: Tensors) -> Tensors:
    return t | {"base_model.model.lm_head.weight": ("F32", [4, 128], bytes(4 * 128 * 4))}


def _to_bf16(t: Tensors) -> Tensors:
    def bf16(raw: bytes) -> bytes:
        out = bytearray(len(raw) // 2)
        out[0::2], out[1::2] = raw[2::4], raw[3::4]
        return bytes(out)

    return {k: ("BF16", s, bf16(r)) for k, (_, s, r) in t.items()}


def _raw_zip(name: str, payload: bytes, *, declared: int, crc: int) -> bytes:
    """A one-member deflated zip whose directory declares `declared` bytes, whatever the data."""
    comp = zlib.compressobj(9, zlib.DEFLATED, -15)
    data = comp.compress(payload) + comp.flush()
    encoded = name.encode()
    local = struct.pack(
        "<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 8, 0, 0x21, crc, len(data), declared, len(encoded), 0
    )
    central = struct.pack(
        "<4sHHHHHHIIIHHHHHII",
        b"PK\x01\x02",
        20,
        20,
        0,
        8,
        0,
        0x21,
        crc,
        len(data),
        declared,
        len(encoded),
        0,
        0,
        0,
        0,
        0,
        0,
    )
    offset = len(local) + len(encoded) + len(data)
    end = struct.pack(
        "<4sHHHHIIH", b"PK\x05\x06", 0, 0, 1, 1, len(central) + len(encoded), offset, 0
    )
    return local + encoded + data + central + encoded + end


def _bomb_by_actual_size(data: bytes) -> bytes:
    """The weights member deflates to 60 MB while its header declares the real, small size."""
    members = dict(members_of(data))
    weights = members["adapter_model.safetensors"]
    bomb = _raw_zip(
        "adapter_model.safetensors",
        weights + bytes(60_000_000),
        declared=len(weights),
        crc=zlib.crc32(weights),
    )
    # Put the honest config in front of it, in one archive: rebuild with zipfile, then swap the
    # weights member's raw bytes for the bomb's.
    config_zip = zip_of([("adapter_config.json", members["adapter_config.json"])])
    return _merge(config_zip, bomb)


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


def _declared_bomb(data: bytes) -> bytes:
    """Honest about its size: 60 MB of zeros (a few KB deflated) where a few hundred KB belong."""
    members = [(n, d) for n, d in members_of(data) if n != "adapter_model.safetensors"]
    return zip_of(
        [*members, ("adapter_model.safetensors", bytes(60_000_000))], zipfile.ZIP_DEFLATED
    )


def _corrupt_crc(data: bytes) -> bytes:
    at = data.index(b'"peft_type"')
    return data[:at] + b'"PEFT_type"' + data[at + 11 :]


def _encrypted_flag(data: bytes) -> bytes:
    at = data.index(b"PK\x01\x02")  # the first central directory entry
    flags = struct.unpack_from("<H", data, at + 8)[0] | 0x1
    return data[: at + 8] + struct.pack("<H", flags) + data[at + 10 :]


def _trailing_bytes(t: bytes) -> bytes:
    return t + b"\0" * 4


# Each case breaks one rule of a real adapter; the test asserts that rule's reason code.
CASES: dict[str, tuple[str, Callable[[bytes], bytes]]] = {
    "wrong base model": (
        AdapterDefect.WRONG_BASE_MODEL,
        lambda d: with_config(d, base_model_name_or_path="Qwen/Qwen2.5-7B-Instruct"),
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
    "an absolute member path": (
        AdapterDefect.ZIP_PATH_UNSAFE,
        lambda d: zip_of([*members_of(d), ("/etc/cron.d/x", b"*")]),
    ),
    "a name that merely ends with the expected name": (
        AdapterDefect.ZIP_UNEXPECTED_MEMBER,
        lambda d: zip_of(
            [("nested/" + n, x) if n == "adapter_config.json" else (n, x) for n, x in members_of(d)]
        ),
    ),
    "a zip bomb by declared size": (AdapterDefect.ZIP_TOO_LARGE, _declared_bomb),
    "a zip bomb by actual size": (
        AdapterDefect.ZIP_EXPANSION_EXCEEDS_DECLARED,
        _bomb_by_actual_size,
    ),
    "a pickle member": (
        AdapterDefect.ZIP_PICKLE_MEMBER,
        lambda d: zip_of([*members_of(d), ("adapter_model.bin", b"\x80\x04cos\nsystem\n.")]),
    ),
    "an untrained all-zero lora_B": (
        AdapterDefect.UNTRAINED,
        lambda d: with_tensors(d, _zero_every_b),
    ),
    "an lm_head tensor": (AdapterDefect.EMBEDDING_TENSOR, lambda d: with_tensors(d, _add_lm_head)),
    "too many members": (
        AdapterDefect.ZIP_TOO_MANY_MEMBERS,
        lambda d: zip_of([*members_of(d)] + [(f"x{i}", b"") for i in range(5)]),
    ),
    "not a zip": (AdapterDefect.NOT_ZIP, lambda d: b"PK\x03\x04 not really a zip" * 10),
    "no adapter_config.json": (
        AdapterDefect.ZIP_MEMBER_MISSING,
        lambda d: zip_of([(n, x) for n, x in members_of(d) if n != "adapter_config.json"]),
    ),
    "a corrupt member (CRC)": (AdapterDefect.ZIP_CORRUPT, _corrupt_crc),
    "an encrypted member": (AdapterDefect.ZIP_UNSUPPORTED, _encrypted_flag),
    "a config that is not JSON": (
        AdapterDefect.CONFIG_INVALID,
        lambda d: with_member(d, "adapter_config.json", lambda _: b"{r: 8"),
    ),
    "not a LoRA config": (AdapterDefect.NOT_LORA, lambda d: with_config(d, peft_type="IA3")),
    "r out of bounds": (AdapterDefect.RANK_OUT_OF_BOUNDS, lambda d: with_config(d, r=1024)),
    "lora_alpha out of bounds": (
        AdapterDefect.ALPHA_OUT_OF_BOUNDS,
        lambda d: with_config(d, lora_alpha=0),
    ),
    "target_modules not projections": (
        AdapterDefect.TARGET_MODULES_INVALID,
        lambda d: with_config(d, target_modules=["embed_tokens"]),
    ),
    "DoRA": (AdapterDefect.UNSUPPORTED_OPTIONS, lambda d: with_config(d, use_dora=True)),
    "tensorant.json not JSON": (
        AdapterDefect.METRICS_INVALID,
        lambda d: with_member(d, "tensorant.json", lambda _: b"\xff"),
    ),
    "bytes after the last tensor": (
        AdapterDefect.SAFETENSORS_INVALID,
        lambda d: with_member(d, "adapter_model.safetensors", _trailing_bytes),
    ),
    "an I8 tensor": (
        AdapterDefect.DTYPE_UNSUPPORTED,
        lambda d: with_tensors(
            d,
            lambda t: (
                t
                | {
                    _first(t, "lora_A.weight"): (
                        "I8",
                        [1, len(t[_first(t, "lora_A.weight")][2])],
                        t[_first(t, "lora_A.weight")][2],
                    )
                }
            ),
        ),
    ),
    "a tensor for an untargeted layer": (
        AdapterDefect.TENSOR_UNEXPECTED,
        lambda d: with_tensors(
            d,
            lambda t: (
                t
                | {
                    "base_model.model.model.layers.9.self_attn.q_proj.lora_A.weight": (
                        "F32",
                        [8, 128],
                        bytes(8 * 128 * 4),
                    )
                }
            ),
        ),
    ),
}


def test_a_real_adapter_from_the_trainer_passes_and_so_does_its_bf16_copy(
    real: bytes, arch: Architecture
) -> None:
    summary = verify_adapter(
        io.BytesIO(real),
        base_model=BASE,
        architecture=arch,
        sha256=hashlib.sha256(real).hexdigest(),
        size_bytes=len(real),
    )
    assert (summary.r, summary.dtype, summary.tensors) == (8, "F32", 56)
    assert summary.parameters == arch.lora_parameters(8) == 90_112
    bf16 = with_tensors(real, _to_bf16)
    assert verify_adapter(io.BytesIO(bf16), base_model=BASE, architecture=arch).dtype == "BF16"
    assert check_adapter(io.BytesIO(real), base_model=BASE, architecture=arch) is None


@pytest.mark.parametrize("case", list(CASES))
def test_an_adapter_breaking_one_rule_is_rejected_with_that_rules_code(
    case: str, real: bytes, arch: Architecture
) -> None:
    reason, make = CASES[case]
    bad = make(real)
    with pytest.raises(AdapterRejected) as rejected:
        # Reported with its own true size and sha256: only the rule under test can fail.
        verify_adapter(
            io.BytesIO(bad),
            base_model=BASE,
            architecture=arch,
            sha256=hashlib.sha256(bad).hexdigest(),
            size_bytes=len(bad),
        )
    assert rejected.value.reason == reason, rejected.value.detail


def _reason(data: bytes, arch: Architecture, **reported: object) -> str | None:
    problem = check_adapter(io.BytesIO(data), base_model=BASE, architecture=arch, **reported)  # type: ignore[arg-type]
    return None if problem is None else problem[0]


def test_a_valid_zip_with_a_wrong_sha256_is_rejected(real: bytes, arch: Architecture) -> None:
    wrong = hashlib.sha256(real + b"x").hexdigest()
    assert _reason(real, arch, sha256=wrong, size_bytes=len(real)) == AdapterDefect.SHA256_MISMATCH


def test_a_valid_zip_with_a_wrong_size_is_rejected(real: bytes, arch: Architecture) -> None:
    sha256 = hashlib.sha256(real).hexdigest()
    assert (
        _reason(real, arch, sha256=sha256, size_bytes=len(real) + 1) == AdapterDefect.SIZE_MISMATCH
    )


def test_an_object_larger_than_any_adapter_of_the_model_is_rejected_unread(
    arch: Architecture,
) -> None:
    assert _reason(bytes(arch.max_zip_bytes() + 1), arch) == AdapterDefect.TOO_LARGE


def test_every_reason_code_has_a_test_case() -> None:
    tested = {reason for reason, _ in CASES.values()} | {
        AdapterDefect.SHA256_MISMATCH,
        AdapterDefect.SIZE_MISMATCH,
        AdapterDefect.TOO_LARGE,
    }
    assert tested == ADAPTER_DEFECTS


def test_the_catalogue_architectures_give_the_known_adapter_sizes() -> None:
    """r=16 over all seven projections, F32 (P2, R7)."""
    millions = {
        k: round(a.lora_parameters(16) / 1e6, 1) for k, a in CATALOGUE_ARCHITECTURES.items()
    }
    assert millions == {
        "Qwen/Qwen2.5-0.5B-Instruct": 8.8,
        "Qwen/Qwen2.5-7B-Instruct": 40.4,
        "meta-llama/Llama-3.2-3B-Instruct": 24.3,
        "meta-llama/Llama-3.1-8B-Instruct": 41.9,
        "mistralai/Mistral-7B-Instruct-v0.3": 41.9,
        "google/gemma-2-27b-it": 114.2,
        "meta-llama/Llama-3.3-70B-Instruct": 207.1,
    }
    gemma = CATALOGUE_ARCHITECTURES["google/gemma-2-27b-it"]
    assert gemma.shape("q_proj") == (4608, 4096) and gemma.shape("o_proj") == (4096, 4608)
    qwen = {
        "model_type": "qwen2",
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
    }
    assert Architecture.from_config(qwen) == CATALOGUE_ARCHITECTURES["Qwen/Qwen2.5-0.5B-Instruct"]
    with pytest.raises(ValueError, match="dimensions"):
        Architecture.from_config({"model_type": "bert"})
