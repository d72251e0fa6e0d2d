"""R7's file formats, read with the stdlib only and in bounded memory: the members of a zip
(streamed from their raw bytes, so an expansion beyond what the directory declares is caught)
and the tensors of a safetensors file (header parsed, data scanned chunk by chunk)."""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO, TypeGuard

CHUNK = 1 << 20
_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_LOCAL = b"PK\x03\x04"
STORED, DEFLATED = 0, 8
ITEMSIZE = {"F32": 4, "BF16": 2, "F16": 2}


class FileDefect(Exception):
    """A defect found while reading; `reason` is one of the stable codes in domain.lora."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def zip_directory(stream: BinaryIO, size: int) -> tuple[int, int] | None:
    """(entries, central directory bytes) as the end-of-central-directory record declares them
    (None: not a zip), read before anything else, so a zip of a million members or with a
    gigabyte-long directory is refused without reading its directory into memory."""
    tail = min(size, 65_557)
    stream.seek(size - tail)
    data = stream.read(tail)
    at = data.rfind(_EOCD)
    if at < 0 or len(data) - at < 22:
        return None
    count, directory = struct.unpack_from("<HI", data, at + 10)
    if (count == 0xFFFF or directory == 0xFFFFFFFF) and data[at - 20 : at - 16] == _EOCD64_LOCATOR:
        (offset,) = struct.unpack_from("<Q", data, at - 20 + 8)
        stream.seek(min(offset, size))  # an offset past the end (up to 2**64) reads nothing
        record = stream.read(56)
        if len(record) < 56 or record[:4] != b"PK\x06\x06":
            return None
        count, directory = struct.unpack_from("<QQ", record, 32)
    return int(count), int(directory)


def member_chunks(
    stream: BinaryIO,
    *,
    name: str,
    header_offset: int,
    compress_type: int,
    compress_size: int,
    file_size: int,
    crc: int,
) -> Iterator[bytes]:
    """The member's bytes, decompressed from its raw data: never more than `file_size` of them
    (more is a zip bomb lying about its size), checked against the CRC at the end."""
    end = stream.seek(0, 2)
    stream.seek(min(header_offset, end))  # zip64 allows offsets past any file (up to 2**64)
    local = stream.read(30)
    if len(local) < 30 or local[:4] != _LOCAL:
        raise FileDefect("adapter_zip_corrupt", f"{name}: no local header where the directory says")
    name_len, extra_len = struct.unpack_from("<HH", local, 26)
    local_name = stream.read(name_len)
    if local_name.decode("utf-8", "replace") != name and local_name.decode("cp437") != name:
        raise FileDefect("adapter_zip_corrupt", f"{name}: the local header names {local_name!r}")
    stream.seek(header_offset + 30 + name_len + extra_len)
    left = compress_size
    produced = 0
    running = 0
    inflate = zlib.decompressobj(-15) if compress_type == DEFLATED else None
    while left > 0:
        raw = stream.read(min(CHUNK, left))
        if not raw:
            raise FileDefect("adapter_zip_corrupt", f"{name}: the archive ends inside it")
        left -= len(raw)
        pieces = [raw] if inflate is None else _inflate(inflate, raw, file_size - produced + 1)
        for piece in pieces:
            produced += len(piece)
            if produced > file_size:
                raise FileDefect(
                    "adapter_zip_expansion_exceeds_declared",
                    f"{name} expands beyond the {file_size} bytes the archive declares",
                )
            running = zlib.crc32(piece, running)
            yield piece
    if inflate is not None and not inflate.eof:
        raise FileDefect("adapter_zip_corrupt", f"{name}: the compressed data is cut short")
    if produced != file_size or running != crc:
        raise FileDefect("adapter_zip_corrupt", f"{name}: size or CRC differs from the directory")


def _inflate(inflate: Any, raw: bytes, budget: int) -> Iterator[bytes]:
    """Decompress `raw` in bounded pieces; stop once more than `budget` bytes came out."""
    data = raw
    produced = 0
    while data and produced <= budget:
        piece = inflate.decompress(data, CHUNK)
        produced += len(piece)
        data = inflate.unconsumed_tail
        if piece:
            yield piece
    if produced <= budget:
        while (piece := inflate.decompress(b"", CHUNK)) and produced <= budget:
            produced += len(piece)
            yield piece


class ByteReader:
    """Exact reads over a chunk iterator."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buf = b""

    def read(self, n: int) -> bytes:
        parts = [self._buf]
        have = len(self._buf)
        while have < n:
            chunk = next(self._chunks, b"")
            if not chunk:
                break
            parts.append(chunk)
            have += len(chunk)
        data = b"".join(parts)
        self._buf = data[n:]
        return data[:n]

    def pieces(self, n: int) -> Iterator[bytes]:
        """`n` bytes as pieces of at most CHUNK (a multiple of every item size)."""
        left = n
        while left > 0:
            piece = self.read(min(left, CHUNK))
            if not piece:
                raise FileDefect("adapter_safetensors_truncated", "the data ends early")
            left -= len(piece)
            yield piece


@dataclass(frozen=True)
class TensorInfo:
    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


def parse_safetensors_header(reader: ByteReader, total: int, max_header: int) -> list[TensorInfo]:
    """The tensors a safetensors file declares, checked to tile its data exactly."""
    if total < 8:
        raise FileDefect("adapter_safetensors_truncated", f"{total} bytes is shorter than a header")
    (n,) = struct.unpack("<Q", reader.read(8))
    if n > max_header:
        raise FileDefect("adapter_safetensors_invalid", f"a {n}-byte header is too large")
    if 8 + n > total:
        raise FileDefect("adapter_safetensors_truncated", "the header runs past the end")
    raw = reader.read(n)
    try:
        header = json.loads(raw.decode("utf-8")) if raw[:1] == b"{" else None
    except (UnicodeDecodeError, ValueError, RecursionError):  # nested past the parser
        header = None
    if not isinstance(header, dict):
        raise FileDefect("adapter_safetensors_invalid", "the header is not a JSON object")
    meta = header.pop("__metadata__", {})
    if not isinstance(meta, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in meta.items()
    ):
        raise FileDefect("adapter_safetensors_invalid", "__metadata__ must map strings to strings")
    tensors = [_tensor(name, entry) for name, entry in header.items()]
    data_len = total - 8 - n
    at = 0
    for t in sorted(tensors, key=lambda t: (t.begin, t.end)):
        if t.begin != at:
            raise FileDefect(
                "adapter_safetensors_invalid", f"{t.name}: offsets leave a gap or overlap"
            )
        at = t.end
    if at > data_len:
        raise FileDefect(
            "adapter_safetensors_truncated", f"data is {data_len} bytes, tensors need {at}"
        )
    if at < data_len:
        raise FileDefect(
            "adapter_safetensors_invalid", f"{data_len - at} bytes after the last tensor"
        )
    return sorted(tensors, key=lambda t: t.begin)


def _naturals(value: Any) -> TypeGuard[list[int]]:
    return isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value
    )


def _tensor(name: str, entry: Any) -> TensorInfo:
    if not isinstance(entry, dict):
        raise FileDefect("adapter_safetensors_invalid", f"{name}: not a tensor entry")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in ITEMSIZE:
        raise FileDefect("adapter_dtype_unsupported", f"{name}: dtype {dtype!r} (F32, BF16, F16)")
    if not (_naturals(shape) and _naturals(offsets) and len(offsets) == 2):
        raise FileDefect("adapter_safetensors_invalid", f"{name}: malformed shape or offsets")
    count = 1
    for d in shape:
        count *= d
    begin, end = offsets
    if end - begin != count * ITEMSIZE[dtype]:
        raise FileDefect("adapter_safetensors_invalid", f"{name}: offsets disagree with the shape")
    return TensorInfo(name, dtype, tuple(shape), begin, end)


# Exponent-bit scan: a float is NaN or infinite exactly when its exponent bits are all ones.
_HIGH = bytes(1 if b & 0x7F == 0x7F else 0 for b in range(256))  # F32 byte 3, BF16 byte 1
_LOW = bytes(1 if b & 0x80 else 0 for b in range(256))  # F32 byte 2, BF16 byte 0
_F16 = bytes(1 if b & 0x7C == 0x7C else 0 for b in range(256))  # F16 byte 1
_NO_SIGN = bytes(b & 0x7F for b in range(256))


def all_finite(piece: bytes, dtype: str) -> bool:
    if dtype == "F16":
        return b"\x01" not in piece[1::2].translate(_F16)
    step = ITEMSIZE[dtype]
    high = piece[step - 1 :: step].translate(_HIGH)
    if b"\x01" not in high:
        return True
    low = piece[step - 2 :: step].translate(_LOW)
    return int.from_bytes(high, "little") & int.from_bytes(low, "little") == 0


def all_zero(piece: bytes, dtype: str) -> bool:
    """Every value is +0 or -0."""
    if piece.count(0) == len(piece):
        return True
    step = ITEMSIZE[dtype]
    signs = piece[step - 1 :: step].translate(_NO_SIGN)
    if signs.count(0) != len(signs):
        return False
    rest = b"".join(piece[i::step] for i in range(step - 1))
    return rest.count(0) == len(rest)
