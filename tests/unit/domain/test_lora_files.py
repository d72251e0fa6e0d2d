"""R7's file formats read by hand (domain/lora_files.py): the zip's end records (zip64 too), a
member's local header and raw data, and the safetensors header, each refusal with its reason and
detail, and the boundaries value by value (docs/mutation.md)."""

from __future__ import annotations

import io
import json
import random
import struct
import zlib
from typing import Any

import pytest

from domain.lora import CATALOGUE_ARCHITECTURES, check_adapter
from domain.lora_files import (
    CHUNK,
    DEFLATED,
    STORED,
    ByteReader,
    FileDefect,
    TensorInfo,
    _inflate,
    member_chunks,
    parse_safetensors_header,
    zip_directory,
)
from tests.lora_builders import QWEN_7B, lora_zip

# ---------------------------------------------------------------- the end of central directory


def eocd(count: int, directory: int, offset: int = 0, comment: int = 0) -> bytes:
    return struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, count, count, directory, offset, comment)


def zip64_end(
    count: int,
    directory: int,
    *,
    small_count: int,
    small_directory: int,
    before: bytes = b"",
    at: int | None = None,
) -> bytes:
    """`before`, a zip64 end record, its locator (pointing at the record unless `at` says
    otherwise), then the classic end record."""
    record = struct.pack(
        "<4sQHHIIQQQQ", b"PK\x06\x06", 44, 45, 45, 0, 0, count, count, directory, 0
    )
    offset = len(before) if at is None else at
    locator = struct.pack("<4sIQI", b"PK\x06\x07", 0, offset, 1)
    return before + record + locator + eocd(small_count, small_directory)


def directory_of(data: bytes) -> tuple[int, int] | None:
    return zip_directory(io.BytesIO(data), len(data))


def test_r7_an_empty_archive_declares_no_members() -> None:
    assert directory_of(eocd(0, 0)) == (0, 0)


def test_r7_counts_up_to_the_field_maxima_are_read_unsigned() -> None:
    assert directory_of(b"data" + eocd(40_000, 3_000_000_000)) == (40_000, 3_000_000_000)
    # 0xFFFF entries without a zip64 locator in front: taken as written
    assert directory_of(b"\0" * 30 + eocd(0xFFFF, 46)) == (0xFFFF, 46)


def test_r7_the_last_end_record_counts_not_one_inside_a_member() -> None:
    fake = eocd(3, 999)
    assert directory_of(b"member data " + fake + b" more data" + eocd(1, 46)) == (1, 46)


def test_r7_a_cut_end_record_is_no_zip() -> None:
    assert directory_of(b"\0" * 40 + eocd(1, 46)[:21]) is None
    assert directory_of(b"") is None


def test_r7_the_end_record_is_looked_for_only_within_the_longest_comment() -> None:
    # 22 bytes of record and at most 65,535 of comment: 65,557 bytes from the end at most
    assert directory_of(eocd(1, 46) + b"c" * 65_535) == (1, 46)
    assert directory_of(eocd(1, 46) + b"c" * 65_536) is None


@pytest.mark.parametrize(
    ("small_count", "small_directory"),
    [(0xFFFF, 46), (5, 0xFFFFFFFF), (0xFFFF, 0xFFFFFFFF)],
)
def test_r7_a_zip64_end_record_gives_the_real_counts(
    small_count: int, small_directory: int
) -> None:
    data = zip64_end(
        70_000, 5_000_000_000, small_count=small_count, small_directory=small_directory
    )
    assert directory_of(data) == (70_000, 5_000_000_000)


def test_r7_zip64_counts_are_read_unsigned() -> None:
    data = zip64_end(2**64 - 1, 2**64 - 1, small_count=0xFFFF, small_directory=0xFFFFFFFF)
    assert directory_of(data) == (2**64 - 1, 2**64 - 1)


def test_r7_a_zip64_end_record_is_found_where_its_locator_points() -> None:
    data = zip64_end(
        70_000, 5_000_000_000, small_count=0xFFFF, small_directory=46, before=b"members" * 40
    )
    assert directory_of(data) == (70_000, 5_000_000_000)


def test_r7_without_the_zip64_markers_the_classic_record_stands() -> None:
    # a zip64 record in front, but the classic record's counts are not the markers
    data = zip64_end(70_000, 5_000_000_000, small_count=4, small_directory=46)
    assert directory_of(data) == (4, 46)


def test_r7_a_zip64_locator_pointing_at_no_record_is_no_zip() -> None:
    good = zip64_end(70_000, 5_000_000_000, small_count=0xFFFF, small_directory=46)
    assert directory_of(b"XXXX" + good[4:]) is None  # no record signature where it points
    past = zip64_end(70_000, 5_000_000_000, small_count=0xFFFF, small_directory=46, at=60)
    assert directory_of(past) is None  # it points too near the end for a whole record


def test_r7_a_zip64_locator_pointing_past_any_file_is_no_zip_not_a_crash() -> None:
    # an offset of 2**64 - 1 made seek() raise OverflowError out of the verifier
    data = zip64_end(70_000, 5_000_000_000, small_count=0xFFFF, small_directory=46, at=2**64 - 1)
    assert directory_of(data) is None
    arch = CATALOGUE_ARCHITECTURES[QWEN_7B]
    assert check_adapter(io.BytesIO(data), base_model=QWEN_7B, architecture=arch) == (
        "adapter_not_zip",
        "no zip end-of-directory record",
    )


# ---------------------------------------------------------------- a member's raw bytes


def stored_member(
    name: bytes, data: bytes, *, extra: bytes = b"", magic: bytes = b"PK\x03\x04"
) -> bytes:
    head = (20, 0, STORED, 0, 0x21, zlib.crc32(data), len(data), len(data), len(name), len(extra))
    return struct.pack("<4sHHHHHIIIHH", magic, *head) + name + extra + data


def read_member(
    blob: bytes,
    name: str,
    data: bytes,
    *,
    compress_type: int = STORED,
    compress_size: int | None = None,
    file_size: int | None = None,
) -> bytes:
    return b"".join(
        member_chunks(
            io.BytesIO(blob),
            name=name,
            header_offset=0,
            compress_type=compress_type,
            compress_size=len(blob) - 30 - len(name.encode())
            if compress_size is None
            else compress_size,
            file_size=len(data) if file_size is None else file_size,
            crc=zlib.crc32(data),
        )
    )


def defect_of(call: Any) -> tuple[str, str]:
    with pytest.raises(FileDefect) as caught:
        call()
    return caught.value.reason, caught.value.detail


def test_r7_a_member_is_read_past_a_long_extra_field() -> None:
    blob = stored_member(b"a.json", b"{}", extra=b"\0" * 40_000)
    assert read_member(blob, "a.json", b"{}", compress_size=2) == b"{}"


@pytest.mark.parametrize(
    ("local_name", "name"),
    [(b"caf\xc3\xa9.json", "caf\u00e9.json"), (b"caf\x82.json", "caf\u00e9.json")],  # UTF-8, cp437
)
def test_r7_a_local_header_may_name_its_member_in_utf8_or_cp437(
    local_name: bytes, name: str
) -> None:
    blob = stored_member(local_name, b"{}")
    assert read_member(blob, name, b"{}", compress_size=2) == b"{}"


def test_r7_a_local_header_naming_another_member_is_corrupt() -> None:
    blob = stored_member(b"b.json", b"{}")
    assert defect_of(lambda: read_member(blob, "a.json", b"{}", compress_size=2)) == (
        "adapter_zip_corrupt",
        "a.json: the local header names b'b.json'",
    )


@pytest.mark.parametrize(
    "blob",
    [
        stored_member(b"a.json", b"{}", magic=b"PK\x01\x02"),  # a whole header, wrong signature
        b"PK\x03\x04" + b"\0" * 20,  # cut short
    ],
)
def test_r7_no_local_header_where_the_directory_points_is_corrupt(blob: bytes) -> None:
    assert defect_of(lambda: read_member(blob, "a.json", b"{}", compress_size=2)) == (
        "adapter_zip_corrupt",
        "a.json: no local header where the directory says",
    )


def test_r7_a_member_said_to_start_past_any_file_is_corrupt_not_a_crash() -> None:
    # a zip64 extra field in the central directory gives adapter_config.json a header offset of
    # 2**63 + 5: seek() raised OverflowError out of the verifier
    data = lora_zip()
    at = data.index(b"PK\x01\x02")
    name_len, extra_len, comment_len = struct.unpack_from("<HHH", data, at + 28)
    end = at + 46 + name_len + extra_len + comment_len
    extra = struct.pack("<HHQ", 1, 8, 2**63 + 5)
    entry = (
        data[at : at + 28]
        + struct.pack("<HHH", name_len, extra_len + len(extra), comment_len)
        + data[at + 34 : at + 42]
        + struct.pack("<I", 0xFFFFFFFF)
        + data[at + 46 : end]
        + extra
    )
    patched = data[:at] + entry + data[end:]
    eocd = patched.rindex(b"PK\x05\x06")
    (directory,) = struct.unpack_from("<I", patched, eocd + 12)
    patched = (
        patched[: eocd + 12] + struct.pack("<I", directory + len(extra)) + patched[eocd + 16 :]
    )
    arch = CATALOGUE_ARCHITECTURES[QWEN_7B]
    assert check_adapter(io.BytesIO(patched), base_model=QWEN_7B, architecture=arch) == (
        "adapter_zip_corrupt",
        "adapter_config.json: no local header where the directory says",
    )


def test_r7_an_archive_ending_inside_a_member_is_corrupt() -> None:
    blob = stored_member(b"a.json", b"{}")
    assert defect_of(lambda: read_member(blob, "a.json", b"{}", compress_size=10)) == (
        "adapter_zip_corrupt",
        "a.json: the archive ends inside it",
    )


def test_r7_a_member_expanding_past_its_declared_size_names_that_size() -> None:
    blob = stored_member(b"a.json", b"0123456789")
    assert defect_of(lambda: read_member(blob, "a.json", b"0123456789", file_size=4)) == (
        "adapter_zip_expansion_exceeds_declared",
        "a.json expands beyond the 4 bytes the archive declares",
    )


def deflated(data: bytes) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    return c.compress(data) + c.flush()


@pytest.mark.parametrize(
    "data",
    [
        bytes(CHUNK),  # inflates to exactly its declared size in one piece
        random.Random(7).randbytes(CHUNK + CHUNK // 2),  # more than one raw chunk to inflate
    ],
)
def test_r7_a_deflated_member_of_its_declared_size_is_read_whole(data: bytes) -> None:
    blob = deflated_member(deflated(data), data)
    assert read_member(blob, "w", data, compress_type=DEFLATED) == data


def deflated_member(raw: bytes, data: bytes) -> bytes:
    """A local header for member "w" holding `raw`, deflated from `data`, then `raw`."""
    head = (20, 0, DEFLATED, 0, 0x21, zlib.crc32(data), len(raw), len(data), 1, 0)
    return struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", *head) + b"w" + raw


def test_r7_a_member_whose_empty_last_block_is_read_after_its_last_byte_is_read_whole() -> None:
    # deflate's stored blocks written by hand: 16 blocks fill the first raw megabyte exactly,
    # so every byte is out before the empty final block (in the next raw read) ends the stream
    data = bytes(range(256)) * (CHUNK // 256)
    data = data[: CHUNK - 16 * 5]
    raw = b"".join(
        b"\x00" + struct.pack("<HH", len(p), len(p) ^ 0xFFFF) + p
        for p in (data[i : i + 65535] for i in range(0, len(data), 65535))
    )
    raw += b"\x01" + struct.pack("<HH", 0, 0xFFFF)
    assert len(raw) == CHUNK + 5
    assert read_member(deflated_member(raw, data), "w", data, compress_type=DEFLATED) == data


def test_r7_a_deflated_member_cut_short_is_corrupt() -> None:
    data = bytes(range(256)) * 64
    blob = deflated_member(deflated(data)[:-3], data)
    assert defect_of(lambda: read_member(blob, "w", data, compress_type=DEFLATED)) == (
        "adapter_zip_corrupt",
        "w: the compressed data is cut short",
    )


def test_r7_a_member_whose_crc_differs_from_the_directory_is_corrupt() -> None:
    blob = stored_member(b"a.json", b"{}")
    with pytest.raises(FileDefect) as caught:
        b"".join(
            member_chunks(
                io.BytesIO(blob),
                name="a.json",
                header_offset=0,
                compress_type=STORED,
                compress_size=2,
                file_size=2,
                crc=zlib.crc32(b"[]"),
            )
        )
    assert (caught.value.reason, caught.value.detail) == (
        "adapter_zip_corrupt",
        "a.json: size or CRC differs from the directory",
    )


# ---------------------------------------------------------------- inflating within a budget


def test_r7_a_member_whose_last_bytes_come_only_when_flushed_still_outgrows_its_budget() -> None:
    data = bytes(CHUNK + 100)
    out = b"".join(_inflate(zlib.decompressobj(-15), deflated(data), CHUNK))
    assert out == data  # more than the budget came out: all of it, the rest was flushed


def test_r7_a_stream_cut_short_inflates_only_to_what_its_bytes_hold() -> None:
    data = bytes(range(256)) * (3 * CHUNK // 256)
    raw = deflated(data)
    inflate = zlib.decompressobj(-15)
    out = b"".join(_inflate(inflate, raw[: len(raw) // 2], 10 * CHUNK))
    assert out and data.startswith(out) and not inflate.eof


# ---------------------------------------------------------------- exact reads


def test_r7_a_read_across_chunks_takes_only_the_chunks_it_needs() -> None:
    chunks = iter([b"a", b"b", b"c", b"d"])
    reader = ByteReader(chunks)
    assert reader.read(3) == b"abc"
    assert next(chunks) == b"d"


# ---------------------------------------------------------------- the safetensors header


def safetensors(header: dict[str, Any] | bytes, data: bytes = b"") -> bytes:
    blob = header if isinstance(header, bytes) else json.dumps(header).encode()
    return struct.pack("<Q", len(blob)) + blob + data


def parse(data: bytes, max_header: int = 4096) -> list[TensorInfo]:
    return parse_safetensors_header(ByteReader(iter([data])), len(data), max_header)


def entry(begin: int, end: int) -> dict[str, Any]:
    return {"dtype": "F32", "shape": [(end - begin) // 4], "data_offsets": [begin, end]}


def test_r7_a_header_without_metadata_lists_its_tensors_in_data_order() -> None:
    header = {"b": entry(8, 16), "a": entry(0, 8)}
    assert parse(safetensors(header, bytes(16))) == [
        TensorInfo("a", "F32", (2,), 0, 8),
        TensorInfo("b", "F32", (2,), 8, 16),
    ]


def test_r7_a_header_of_exactly_the_largest_size_fills_the_file() -> None:
    blob = b"{}" + b" " * 62
    assert parse(safetensors(blob), max_header=64) == []


@pytest.mark.parametrize(
    ("data", "reason", "detail"),
    [
        (bytes(7), "adapter_safetensors_truncated", "7 bytes is shorter than a header"),
        (bytes(8), "adapter_safetensors_invalid", "the header is not a JSON object"),
        (
            safetensors(b"{}" + b" " * 4095),
            "adapter_safetensors_invalid",
            "a 4097-byte header is too large",
        ),
        (
            struct.pack("<Q", 2**64 - 1),
            "adapter_safetensors_invalid",
            "a 18446744073709551615-byte header is too large",
        ),
        (
            struct.pack("<Q", 16) + b"{}" + b" " * 13,
            "adapter_safetensors_truncated",
            "the header runs past the end",
        ),
        (
            safetensors(b' {"a": 1}'),
            "adapter_safetensors_invalid",
            "the header is not a JSON object",
        ),
        (safetensors(b"[]"), "adapter_safetensors_invalid", "the header is not a JSON object"),
        (safetensors(b"{\xff}"), "adapter_safetensors_invalid", "the header is not a JSON object"),
        (
            safetensors({"__metadata__": {"format": 1}}),
            "adapter_safetensors_invalid",
            "__metadata__ must map strings to strings",
        ),
        (
            safetensors({"__metadata__": "pt"}),
            "adapter_safetensors_invalid",
            "__metadata__ must map strings to strings",
        ),
        (
            safetensors({"a": entry(0, 8), "b": entry(12, 20)}, bytes(20)),
            "adapter_safetensors_invalid",
            "b: offsets leave a gap or overlap",
        ),
        (
            safetensors({"a": entry(0, 8)}, bytes(4)),
            "adapter_safetensors_truncated",
            "data is 4 bytes, tensors need 8",
        ),
        (
            safetensors({"a": entry(0, 8)}, bytes(12)),
            "adapter_safetensors_invalid",
            "4 bytes after the last tensor",
        ),
    ],
)
def test_r7_a_bad_safetensors_header_is_refused_with_its_reason(
    data: bytes, reason: str, detail: str
) -> None:
    assert defect_of(lambda: parse(data)) == (reason, detail)
