"""R7: the numbers an adapter is checked against (a model's config.json), the refusal's text, and
the all-zero test of untrained weights, pinned value by value (docs/mutation.md)."""

from __future__ import annotations

import hashlib
import io
import json
import struct
import zipfile
import zlib
from collections.abc import Callable
from typing import Any

import pytest

from domain.lora import (
    CATALOGUE_ARCHITECTURES,
    SMALL_MEMBER_BYTES,
    AdapterRejected,
    AdapterSummary,
    Architecture,
    _arch,
    _reject,
    check_adapter,
    verify_adapter,
)
from domain.lora_files import (
    CHUNK,
    ByteReader,
    FileDefect,
    TensorInfo,
    _inflate,
    _tensor,
    all_finite,
    all_zero,
)
from tests.lora_builders import (
    QWEN_7B,
    Tensors,
    lora_zip,
    members_of,
    with_config,
    with_member,
    with_tensors,
    zip_of,
)

QWEN_05B: dict[str, Any] = {
    "model_type": "qwen2",
    "hidden_size": 896,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
}
GEMMA_27B: dict[str, Any] = {
    "model_type": "gemma2",
    "hidden_size": 4608,
    "num_attention_heads": 32,
    "num_key_value_heads": 16,
    "head_dim": 128,  # not 4608 / 32
    "intermediate_size": 36864,
    "num_hidden_layers": 46,
}


def test_r7_widths_come_from_heads_times_head_dim() -> None:
    assert Architecture.from_config(QWEN_05B) == Architecture("qwen2", 896, 4864, 24, 896, 128)
    assert (
        Architecture.from_config(QWEN_05B) == CATALOGUE_ARCHITECTURES["Qwen/Qwen2.5-0.5B-Instruct"]
    )
    assert Architecture.from_config(GEMMA_27B) == Architecture(
        "gemma2", 4608, 36864, 46, 4096, 2048
    )
    assert _arch("gemma2", 4608, 36864, 46, 32, 16, 128) == Architecture(
        "gemma2", 4608, 36864, 46, 4096, 2048
    )


def test_r7_without_key_value_heads_or_model_type_the_defaults_apply() -> None:
    config = {k: v for k, v in QWEN_05B.items() if k not in ("num_key_value_heads", "model_type")}
    assert Architecture.from_config(config) == Architecture("", 896, 4864, 24, 896, 896)


def test_r7_a_dimension_of_one_is_allowed() -> None:
    config = {**GEMMA_27B, "num_hidden_layers": 1, "num_key_value_heads": 1, "head_dim": 1}
    assert Architecture.from_config(config).kv_out == 1


@pytest.mark.parametrize(
    "change",
    [
        {"hidden_size": 0},
        {"intermediate_size": 0},
        {"num_hidden_layers": 0},
        {"num_attention_heads": -1},
        {"num_key_value_heads": -2},
        # negative heads and head_dim multiply to positive widths: still refused (a mutant
        # of head_dim's division showed such a config was accepted)
        {"num_attention_heads": -4, "num_key_value_heads": -4, "head_dim": -3},
        {"hidden_size": 12, "num_attention_heads": -4, "num_key_value_heads": -4, "head_dim": None},
        {"head_dim": -128, "num_attention_heads": -32, "num_key_value_heads": -16},
    ],
)
def test_r7_a_non_positive_dimension_is_refused(change: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=r"^config\.json has a non-positive dimension$"):
        Architecture.from_config({**GEMMA_27B, **change})


def test_r7_a_refusal_reads_reason_then_detail() -> None:
    rejected = _reject("adapter_not_zip", "no zip end-of-directory record")
    assert (rejected.reason, rejected.detail) == (
        "adapter_not_zip",
        "no zip end-of-directory record",
    )
    assert str(rejected) == "adapter_not_zip: no zip end-of-directory record"
    assert str(AdapterRejected("a", "b")) == "a: b"
    defect = FileDefect("adapter_zip_corrupt", "bad crc")
    assert (defect.reason, defect.detail, str(defect)) == (
        "adapter_zip_corrupt",
        "bad crc",
        "adapter_zip_corrupt: bad crc",
    )


def test_r7_a_valid_adapter_checks_clean_and_a_wrong_one_says_why() -> None:
    data = lora_zip()
    arch = CATALOGUE_ARCHITECTURES[QWEN_7B]
    assert check_adapter(io.BytesIO(data), base_model=QWEN_7B, architecture=arch) is None
    assert verify_adapter(io.BytesIO(data), base_model=QWEN_7B, architecture=arch).r == 1
    wrong = check_adapter(io.BytesIO(data), base_model="other/model", architecture=arch)
    assert wrong == (
        "adapter_wrong_base_model",
        f"made for {QWEN_7B!r}, the run trains 'other/model'",
    )


@pytest.mark.parametrize(
    ("piece", "dtype", "zero"),
    [
        (b"\x00" * 8, "F32", True),
        (b"\x00\x00\x00\x80" * 2, "F32", True),  # -0.0
        (b"\x00\x80" * 3, "BF16", True),  # -0.0
        (b"\x01" * 4, "F32", False),
        (b"\x00\x00\x00\x01" * 2, "F32", False),  # only the high byte is set
        (b"\x00\x00\x00\x81", "F32", False),
        (b"\x00\x00\x01\x80", "F32", False),
        (b"\x00\x01", "F16", False),
    ],
)
def test_r7_all_zero_means_every_value_is_plus_or_minus_zero(
    piece: bytes, dtype: str, zero: bool
) -> None:
    assert all_zero(piece, dtype) is zero


def deflated(data: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


DATA = bytes(range(256)) * (3 * CHUNK // 256) + b"tail"  # 3 MiB and 4 bytes, in 1 MiB pieces


@pytest.mark.parametrize("budget", [len(DATA), len(DATA) + 1, 10 * CHUNK])
def test_r7_a_member_within_its_budget_inflates_whole_in_bounded_pieces(budget: int) -> None:
    pieces = list(_inflate(zlib.decompressobj(-15), deflated(DATA), budget))
    assert b"".join(pieces) == DATA
    assert max(len(p) for p in pieces) <= CHUNK and all(pieces)


@pytest.mark.parametrize("budget", [0, 1, CHUNK - 1, CHUNK, CHUNK + 1, len(DATA) - 1])
def test_r7_a_member_that_outgrows_its_budget_stops_soon_after(budget: int) -> None:
    out = b"".join(_inflate(zlib.decompressobj(-15), deflated(DATA), budget))
    assert DATA.startswith(out)
    assert budget < len(out) <= budget + CHUNK


def test_r7_tensor_data_is_read_in_exact_pieces_and_a_short_one_is_truncated() -> None:
    reader = ByteReader(iter([b"abc", b"defg"]))
    assert list(reader.pieces(1)) == [b"a"]
    assert list(reader.pieces(5)) == [b"bcdef"]
    with pytest.raises(FileDefect) as caught:
        list(reader.pieces(2))
    assert (caught.value.reason, caught.value.detail) == (
        "adapter_safetensors_truncated",
        "the data ends early",
    )


@pytest.mark.parametrize(
    ("piece", "dtype", "finite"),
    [
        (b"\x00\x3c\x00\x01", "F16", True),  # 1.0 and a tiny value
        (b"\x00\x3c\x00\x7c", "F16", False),  # 1.0, +inf
        (b"\x00\xfc", "F16", False),  # -inf
        (b"\x00\x00\x00\x7f", "F32", True),  # 1.7e38: the exponent is not all ones
        (b"\x00\x00\x80\x7f", "F32", False),  # +inf
        (b"\x00\x00\x00\x3f\x00\x00\xc0\xff", "F32", False),  # 0.5, NaN
        (b"\x80\x7f", "BF16", False),  # +inf
        (b"\x00\x7f\x80\x3f", "BF16", True),
    ],
)
def test_r7_all_finite_finds_infinity_and_nan_in_each_dtype(
    piece: bytes, dtype: str, finite: bool
) -> None:
    assert all_finite(piece, dtype) is finite


L0 = "base_model.model.model.layers.0.self_attn"


def refusal(change: Callable[[Tensors], Tensors]) -> tuple[str, str] | None:
    data = with_tensors(lora_zip(), change)
    arch = CATALOGUE_ARCHITECTURES[QWEN_7B]
    return check_adapter(io.BytesIO(data), base_model=QWEN_7B, architecture=arch)


@pytest.mark.parametrize(
    "name", ["base_model.model.model.embed_tokens.weight", "base_model.model.lm_head.weight"]
)
def test_r7_a_vocabulary_tensor_is_named_in_the_refusal(name: str) -> None:
    assert refusal(lambda t: {name: ("F32", [1, 2], bytes(8))} | t) == (
        "adapter_embedding_tensor",
        f"{name} (a vocabulary change)",
    )


def test_r7_a_tensor_for_a_module_not_targeted_is_named_in_the_refusal() -> None:
    name = f"{L0}.k_proj.lora_A.weight"
    assert refusal(lambda t: {name: ("F32", [1, 3584], bytes(4 * 3584))} | t) == (
        "adapter_tensor_unexpected",
        name,
    )


def test_r7_a_wrong_shape_says_what_it_is_and_what_it_needs() -> None:
    name = f"{L0}.q_proj.lora_A.weight"
    assert refusal(lambda t: t | {name: ("F32", [2, 3584], bytes(8 * 3584))}) == (
        "adapter_shape_mismatch",
        f"{name} is [2, 3584], r=1 on qwen2 needs [1, 3584]",
    )


def test_r7_missing_tensors_are_counted_and_one_is_named() -> None:
    gone = {f"{L0}.q_proj.lora_B.weight", f"{L0}.q_proj.lora_A.weight"}
    assert refusal(lambda t: {k: v for k, v in t.items() if k not in gone}) == (
        "adapter_tensor_missing",
        f"2 missing, e.g. {L0}.q_proj.lora_A.weight",
    )


def test_r7_a_well_formed_tensor_entry_is_read() -> None:
    entry = {"dtype": "BF16", "shape": [2, 3], "data_offsets": [8, 20]}
    assert _tensor("t", entry) == TensorInfo("t", "BF16", (2, 3), 8, 20)


@pytest.mark.parametrize(
    ("entry", "reason", "detail"),
    [
        ([1], "adapter_safetensors_invalid", "t: not a tensor entry"),
        ({"dtype": "I64"}, "adapter_dtype_unsupported", "t: dtype 'I64' (F32, BF16, F16)"),
        (
            {"dtype": "F32", "shape": [2, -1], "data_offsets": [0, 8]},
            "adapter_safetensors_invalid",
            "t: malformed shape or offsets",
        ),
        (
            {"dtype": "F32", "shape": [2, True], "data_offsets": [0, 8]},
            "adapter_safetensors_invalid",
            "t: malformed shape or offsets",
        ),
        (
            {"dtype": "F32", "shape": [2], "data_offsets": [0, "8"]},
            "adapter_safetensors_invalid",
            "t: malformed shape or offsets",
        ),
        (
            {"dtype": "F32", "shape": "2", "data_offsets": [0, 8]},
            "adapter_safetensors_invalid",
            "t: malformed shape or offsets",
        ),
        (
            {"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 16]},
            "adapter_safetensors_invalid",
            "t: malformed shape or offsets",
        ),
        (
            {"dtype": "F32", "shape": [2], "data_offsets": [0, 12]},
            "adapter_safetensors_invalid",
            "t: offsets disagree with the shape",
        ),
    ],
)
def test_r7_a_malformed_tensor_entry_is_refused_with_its_reason(
    entry: Any, reason: str, detail: str
) -> None:
    with pytest.raises(FileDefect) as caught:
        _tensor("t", entry)
    assert (caught.value.reason, caught.value.detail) == (reason, detail)


def test_r7_exact_reads_take_no_more_chunks_than_needed() -> None:
    chunks = iter([b"ab", b"cd", b"ef"])
    reader = ByteReader(chunks)
    assert reader.read(2) == b"ab"
    assert next(chunks) == b"cd"  # the reader did not take it
    assert reader.read(3) == b"ef"  # the data ends: what there is
    assert reader.read(1) == b""


# ---------------------------------------------------------------- each rule's refusal, in full

ARCH = CATALOGUE_ARCHITECTURES[QWEN_7B]
MODULES = "q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj"


def check(data: bytes) -> tuple[str, str] | None:
    return check_adapter(io.BytesIO(data), base_model=QWEN_7B, architecture=ARCH)


def verified(data: bytes) -> AdapterSummary:
    return verify_adapter(io.BytesIO(data), base_model=QWEN_7B, architecture=ARCH)


def test_r7_head_dim_is_divided_in_integers_even_past_float_precision() -> None:
    config = {**QWEN_05B, "hidden_size": 2**53 + 1, "num_attention_heads": 1}
    config.pop("num_key_value_heads")
    assert Architecture.from_config(config).q_out == 2**53 + 1


@pytest.mark.parametrize(
    ("change", "reason", "detail"),
    [
        ({"peft_type": "IA3"}, "adapter_not_lora", "peft_type 'IA3', task_type 'CAUSAL_LM'"),
        ({"task_type": "SEQ_CLS"}, "adapter_not_lora", "peft_type 'LORA', task_type 'SEQ_CLS'"),
        ({"r": True}, "adapter_rank_out_of_bounds", "r=True (1..256)"),
        ({"r": 0}, "adapter_rank_out_of_bounds", "r=0 (1..256)"),
        ({"r": 257}, "adapter_rank_out_of_bounds", "r=257 (1..256)"),
        ({"lora_alpha": True}, "adapter_alpha_out_of_bounds", "lora_alpha=True"),
        ({"lora_alpha": 0}, "adapter_alpha_out_of_bounds", "lora_alpha=0"),
        ({"lora_alpha": 4096.5}, "adapter_alpha_out_of_bounds", "lora_alpha=4096.5"),
        (
            {"target_modules": []},
            "adapter_target_modules_invalid",
            f"target_modules=[] (a list of {MODULES})",
        ),
        (  # not a list, though its keys are projections
            {"target_modules": {"q_proj": 1}},
            "adapter_target_modules_invalid",
            f"target_modules={{'q_proj': 1}} (a list of {MODULES})",
        ),
        (
            {"target_modules": ["q_proj", "q_proj"]},
            "adapter_target_modules_invalid",
            f"target_modules=['q_proj', 'q_proj'] (a list of {MODULES})",
        ),
    ],
)
def test_r7_a_config_breaking_a_rule_is_refused_with_what_it_holds(
    change: dict[str, Any], reason: str, detail: str
) -> None:
    assert check(with_config(lora_zip(), **change)) == (reason, detail)


@pytest.mark.parametrize("alpha", [0.5, 1, 4096])
def test_r7_lora_alpha_above_zero_up_to_4096_is_accepted(alpha: float) -> None:
    assert verified(with_config(lora_zip(), lora_alpha=alpha)).lora_alpha == alpha


@pytest.mark.parametrize(
    ("member", "content", "reason", "detail"),
    [
        (
            "adapter_config.json",
            b"[]",
            "adapter_config_invalid",
            "adapter_config.json is not an object",
        ),
        (
            "adapter_config.json",
            b"{r: 8",
            "adapter_config_invalid",
            "adapter_config.json is not JSON",
        ),
        ("tensorant.json", b"[]", "adapter_metrics_invalid", "tensorant.json is not an object"),
    ],
)
def test_r7_a_json_member_that_is_not_an_object_is_refused(
    member: str, content: bytes, reason: str, detail: str
) -> None:
    assert check(with_member(lora_zip(), member, lambda _: content)) == (reason, detail)


def test_r7_a_metrics_file_of_the_largest_size_read_in_two_pieces_is_read_whole() -> None:
    members = dict(members_of(lora_zip()))
    note = "x" * (SMALL_MEMBER_BYTES - len(json.dumps({"note": ""})))
    metrics = json.dumps({"note": note}).encode()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("adapter_config.json", members["adapter_config.json"])
        z.writestr("adapter_model.safetensors", members["adapter_model.safetensors"])
        # deflate's level 0 stores: more raw bytes than one read takes, so two pieces inflate
        z.writestr("tensorant.json", metrics, zipfile.ZIP_DEFLATED, compresslevel=0)
        assert (z.getinfo("tensorant.json").file_size, len(metrics)) == (SMALL_MEMBER_BYTES,) * 2
        assert z.getinfo("tensorant.json").compress_size > CHUNK
    assert verified(buf.getvalue()).metrics == {"note": note}


def _header_of(size: int) -> Callable[[bytes], bytes]:
    """The safetensors file with its header padded with spaces to `size` bytes."""

    def change(data: bytes) -> bytes:
        (n,) = struct.unpack("<Q", data[:8])
        blob = data[8 : 8 + n].rstrip(b" ")
        return struct.pack("<Q", size) + blob + b" " * (size - len(blob)) + data[8 + n :]

    return change


def test_r7_the_safetensors_header_may_take_4096_bytes_and_512_a_tensor() -> None:
    limit = 4096 + 512 * 2 * ARCH.num_layers  # rank 1 on q_proj: an A and a B per layer
    weights = "adapter_model.safetensors"
    assert check(with_member(lora_zip(), weights, _header_of(limit))) is None
    assert check(with_member(lora_zip(), weights, _header_of(limit + 1))) == (
        "adapter_safetensors_invalid",
        f"a {limit + 1}-byte header is too large",
    )


def test_r7_a_nan_is_named_with_its_tensor() -> None:
    name = f"{L0}.q_proj.lora_A.weight"

    def nan(t: Tensors) -> Tensors:
        dtype, shape, raw = t[name]
        return t | {name: (dtype, shape, struct.pack("<f", float("nan")) + raw[4:])}

    assert refusal(nan) == ("adapter_non_finite", f"{name} holds NaN or infinity")


def _zero_b(keep: int | None) -> Callable[[Tensors], Tensors]:
    """Every lora_B all zeros but the `keep`-th (in data order)."""

    def change(t: Tensors) -> Tensors:
        bs = [k for k in t if ".lora_B." in k]
        return t | {
            k: (d, s, bytes(len(r)))
            for k, (d, s, r) in t.items()
            if k in bs and (keep is None or k != bs[keep])
        }

    return change


def test_r7_one_trained_lora_b_is_enough_and_none_is_untrained() -> None:
    assert refusal(_zero_b(keep=0)) is None  # the first B, then zeros: trained stays found
    assert refusal(_zero_b(keep=None)) == (
        "adapter_untrained",
        "every lora_B is all zeros (never trained)",
    )


def test_r7_weights_whose_bytes_differ_from_their_crc_are_corrupt() -> None:
    data = bytearray(lora_zip())
    info = zipfile.ZipFile(io.BytesIO(bytes(data))).getinfo("adapter_model.safetensors")
    start = info.header_offset + 30 + len(info.filename) + len(info.extra)
    (n,) = struct.unpack_from("<Q", data, start)
    data[start + 8 + n] ^= 0x01  # the lowest mantissa bit of the first value: still finite
    assert check(bytes(data)) == (
        "adapter_zip_corrupt",
        "adapter_model.safetensors: size or CRC differs from the directory",
    )


def test_r7_an_adapter_of_two_dtypes_reports_both() -> None:
    def a_to_bf16(t: Tensors) -> Tensors:
        return t | {
            k: ("BF16", s, b"".join(r[i + 2 : i + 4] for i in range(0, len(r), 4)))
            for k, (_, s, r) in t.items()
            if ".lora_A." in k
        }

    summary = verified(with_tensors(lora_zip(), a_to_bf16))
    assert (summary.dtype, summary.tensors) == ("BF16+F32", 2 * ARCH.num_layers)


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"use_dora": True}, "set: use_dora"),
        ({"modules_to_save": ["lm_head"]}, "set: modules_to_save"),
        ({"rank_pattern": {"q_proj": 4}}, "set: rank_pattern"),
        ({"alpha_pattern": {"q_proj": 4}}, "set: alpha_pattern"),
        ({"layers_to_transform": [0]}, "set: layers_to_transform"),
        ({"bias": "all"}, "set: bias"),
        ({"use_dora": True, "bias": "lora_only"}, "set: use_dora, bias"),
    ],
)
def test_r7_each_unsupported_option_is_named(change: dict[str, Any], detail: str) -> None:
    assert check(with_config(lora_zip(), **change)) == ("adapter_unsupported_options", detail)


def test_r7_a_config_without_bias_means_none_and_modules_come_in_canonical_order() -> None:
    data = lora_zip(modules=("q_proj", "v_proj"))

    def reorder_without_bias(d: bytes) -> bytes:
        config = {k: v for k, v in json.loads(d).items() if k != "bias"}
        return json.dumps(config | {"target_modules": ["v_proj", "q_proj"]}).encode()

    summary = verified(with_member(data, "adapter_config.json", reorder_without_bias))
    assert summary.target_modules == ("q_proj", "v_proj")


def _named(data: bytes, old: str, new: str) -> bytes:
    return zip_of([(new if n == old else n, d) for n, d in members_of(data)])


def _encrypted(data: bytes) -> bytes:
    at = data.index(b"PK\x01\x02")  # the first central directory entry: adapter_config.json
    flags = struct.unpack_from("<H", data, at + 8)[0] | 0x1
    return data[: at + 8] + struct.pack("<H", flags) + data[at + 10 :]


@pytest.mark.parametrize(
    ("make", "reason", "detail"),
    [
        (lambda d: b"not a zip" * 10, "adapter_not_zip", "no zip end-of-directory record"),
        (  # an end record whose directory is not where it says: zipfile's own words
            lambda d: b"x" * 100 + struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 1, 1, 46, 0, 0),
            "adapter_not_zip",
            "Bad magic number for central directory",
        ),
        (
            lambda d: zip_of([*members_of(d), ("README.md", b""), ("x", b"")]),
            "adapter_zip_too_many_members",
            "5 members",
        ),
        (
            lambda d: zip_of([*members_of(d), ("../evil.sh", b"")]),
            "adapter_zip_path_unsafe",
            "member '../evil.sh' escapes the folder",
        ),
        (
            lambda d: zip_of([*members_of(d), ("\\evil.sh", b"")]),
            "adapter_zip_path_unsafe",
            "member '\\\\evil.sh' escapes the folder",
        ),
        (
            lambda d: zip_of([*members_of(d), ("C:evil.sh", b"")]),
            "adapter_zip_path_unsafe",
            "member 'C:evil.sh' escapes the folder",
        ),
        (
            lambda d: zip_of([*members_of(d), ("c:evil.sh", b"")]),
            "adapter_zip_path_unsafe",
            "member 'c:evil.sh' escapes the folder",
        ),
        (
            lambda d: zip_of([*members_of(d), ("adapter_model.bin", b"")]),
            "adapter_zip_pickle_member",
            "member 'adapter_model.bin' is a pickle",
        ),
        (
            lambda d: _named(d, "adapter_config.json", "nested/adapter_config.json"),
            "adapter_zip_unexpected_member",
            "member 'nested/adapter_config.json'",
        ),
        (_encrypted, "adapter_zip_unsupported", "adapter_config.json: encrypted or unknown method"),
        (
            lambda d: _named(d, "adapter_config.json", "README.md"),
            "adapter_zip_member_missing",
            "no adapter_config.json",
        ),
        (
            lambda d: zip_of([*members_of(d), ("README.md", bytes(SMALL_MEMBER_BYTES + 1))]),
            "adapter_zip_too_large",
            "members declare {} bytes",
        ),
    ],
)
def test_r7_a_zip_breaking_a_rule_is_refused_with_the_member_named(
    make: Callable[[bytes], bytes], reason: str, detail: str
) -> None:
    data = lora_zip()
    declared = sum(len(d) for _, d in members_of(data)) + SMALL_MEMBER_BYTES + 1
    assert check(make(data)) == (reason, detail.format(declared))


TINY = Architecture("tiny", 8, 16, 1, 8, 8)


def test_r7_weights_may_declare_up_to_the_largest_adapter_of_the_model() -> None:
    config = dict(members_of(lora_zip()))["adapter_config.json"]
    limit = TINY.max_weights_bytes()

    def reason(weights: int) -> tuple[str, str] | None:
        data = zip_of(
            [("adapter_config.json", config), ("adapter_model.safetensors", bytes(weights))]
        )
        return check_adapter(io.BytesIO(data), base_model=QWEN_7B, architecture=TINY)

    assert reason(limit) == ("adapter_safetensors_invalid", "the header is not a JSON object")
    assert reason(limit + 1) == (
        "adapter_zip_too_large",
        f"members declare {limit + 1 + len(config)} bytes",
    )


def test_r7_a_central_directory_of_64_kib_is_read_and_a_larger_one_refused() -> None:
    def with_comment(length: int) -> bytes:
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w") as z:
            for name, d in members_of(lora_zip()):
                info = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
                if name == "tensorant.json":
                    info.comment = b"c" * length
                z.writestr(info, d)
        return buf.getvalue()

    base = with_comment(0)
    (_, directory) = struct.unpack_from("<HI", base, len(base) - 22 + 10)
    at_limit = 64 * 1024 - directory
    assert check(with_comment(at_limit)) is None
    assert check(with_comment(at_limit + 1)) == ("adapter_zip_corrupt", "a 65537-byte directory")


def test_r7_an_object_may_be_as_large_as_the_largest_adapter_and_four_mib_more() -> None:
    # rank 256 on seven projections of one layer: 256 x 136 parameters of 4 bytes, 8 bytes of
    # length, 256 bytes of header for each of 14 tensors and 4096 more
    assert TINY.max_weights_bytes() == 256 * 136 * 4 + 8 + 256 * 14 + 4096 == 146_952
    limit = TINY.max_zip_bytes()
    assert limit == 146_952 + 4 * (1 << 20)

    def reason(size: int) -> tuple[str, str] | None:
        return check_adapter(io.BytesIO(bytes(size)), base_model=QWEN_7B, architecture=TINY)

    assert reason(limit) == ("adapter_not_zip", "no zip end-of-directory record")
    assert reason(limit + 1) == (
        "adapter_too_large",
        f"{limit + 1} bytes is more than this model allows",
    )


def test_r7_a_size_or_sha256_other_than_reported_says_both() -> None:
    data = lora_zip()
    digest = hashlib.sha256(data).hexdigest()
    wrong_size = check_adapter(
        io.BytesIO(data), base_model=QWEN_7B, architecture=ARCH, size_bytes=len(data) + 1
    )
    assert wrong_size == ("adapter_size_mismatch", f"{len(data)} bytes, reported {len(data) + 1}")
    other = hashlib.sha256(b"other").hexdigest()
    wrong_sha = check_adapter(io.BytesIO(data), base_model=QWEN_7B, architecture=ARCH, sha256=other)
    assert wrong_sha == ("adapter_sha256_mismatch", f"sha256 is {digest}, reported {other}")
    upper = check_adapter(
        io.BytesIO(data), base_model=QWEN_7B, architecture=ARCH, sha256=digest.upper()
    )
    assert upper is None


def test_r7_the_summary_counts_what_the_adapter_is() -> None:
    data = lora_zip(modules=("v_proj", "q_proj"))
    summary = verified(data)
    assert (summary.r, summary.lora_alpha, summary.target_modules) == (1, 2.0, ("q_proj", "v_proj"))
    assert (summary.dtype, summary.tensors, summary.metrics) == ("F32", 4 * 28, {"partial": False})
    # 28 layers x r=1 x (q: 3584 in, 3584 out; v: 3584 in, 4 x 128 out)
    assert summary.parameters == 28 * (3584 + 3584 + 3584 + 512) == 315_392
    assert (summary.size_bytes, summary.sha256) == (len(data), hashlib.sha256(data).hexdigest())
