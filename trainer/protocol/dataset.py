"""Dataset rows (P1): the one rule set the control plane checks at upload and the trainer again.

JSONL, UTF-8, one JSON object per line, blank lines ignored. Either chat rows
`{"messages": [{"role": "system"|"user"|"assistant", "content": "..."}...]}` with at least one
non-empty assistant turn, or `{"prompt": "...", "completion": "..."}` with a non-empty completion;
one file holds one format. The check streams over byte chunks in bounded memory (one line at a
time, each at most `max_line_bytes`) and computes size and sha256 in the same pass.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from trainer.protocol.bounded import bounded_loads

CHAT = "chat"
PROMPT_COMPLETION = "prompt_completion"
ROLES = ("system", "user", "assistant")
MAX_PROBLEMS = 20
MAX_LINE_BYTES = 8 * 1024 * 1024
CHUNK_BYTES = 64 * 1024
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class DatasetProblem:
    line: int  # 1-based; 0 for the file as a whole
    problem: str

    def to_json(self) -> dict[str, Any]:
        return {"line": self.line, "problem": self.problem}


@dataclass
class DatasetCheck:
    format: str | None = None
    row_count: int = 0
    size_bytes: int = 0
    sha256: str = ""
    problems: list[DatasetProblem] = field(default_factory=list)  # the first MAX_PROBLEMS
    problem_count: int = 0

    @property
    def ok(self) -> bool:
        return self.problem_count == 0


def read_chunks(stream: BinaryIO, size: int = CHUNK_BYTES) -> Iterator[bytes]:
    """A binary file object as chunks (works for files, sockets and boto3 bodies alike)."""
    while chunk := stream.read(size):
        yield chunk


def row_format(row: Any) -> tuple[str | None, str | None]:
    """(format, problem) of one parsed row; problem is None when the row is valid."""
    if not isinstance(row, dict):
        return None, "not a JSON object"
    if "messages" in row:
        if "prompt" in row or "completion" in row:
            return None, "has both messages and prompt/completion"
        return CHAT, _chat_problem(row["messages"])
    if "prompt" in row or "completion" in row:
        return PROMPT_COMPLETION, _prompt_completion_problem(row)
    return None, 'needs "messages" or "prompt" and "completion"'


def _chat_problem(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "messages must be a non-empty list"
    answered = False
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            return f"messages[{i}] is not an object"
        if m.get("role") not in ROLES:
            return f"messages[{i}].role must be one of system, user, assistant"
        if not isinstance(m.get("content"), str):
            return f"messages[{i}].content must be a string"
        answered = answered or (m["role"] == "assistant" and bool(m["content"].strip()))
    return None if answered else "no non-empty assistant message"


def _prompt_completion_problem(row: dict[str, Any]) -> str | None:
    if not isinstance(row.get("prompt"), str):
        return "prompt must be a string"
    if not isinstance(row.get("completion"), str):
        return "completion must be a string"
    if not row["completion"].strip():
        return "completion is empty"
    return None


def _lines(chunks: Iterable[bytes], limit: int, digest: Any) -> Iterator[tuple[bytes | None, int]]:
    """(line without its newline | None when longer than limit, bytes seen so far)."""
    buf = bytearray()
    too_long = False
    size = 0
    for chunk in chunks:
        digest.update(chunk)
        size += len(chunk)
        start = 0
        while (nl := chunk.find(b"\n", start)) >= 0:
            if not too_long:
                buf += chunk[start:nl]
            yield (None if too_long or len(buf) > limit else bytes(buf)), size
            buf.clear()
            too_long = False
            start = nl + 1
        if not too_long:
            buf += chunk[start:]
            if len(buf) > limit:
                too_long = True
                buf.clear()
    if buf or too_long:
        yield (None if too_long else bytes(buf)), size
    yield b"", size  # a sentinel so the caller learns the final size


def check_dataset(
    chunks: Iterable[bytes],
    *,
    on_row: Callable[[int, dict[str, Any]], None] | None = None,
    max_problems: int = MAX_PROBLEMS,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> DatasetCheck:
    """Validate every row; `on_row(line, row)` receives each valid row (the trainer keeps them)."""
    result = DatasetCheck()
    digest = hashlib.sha256()
    first_row_line = 0

    def problem(line: int, text: str) -> None:
        result.problem_count += 1
        if len(result.problems) < max_problems:
            result.problems.append(DatasetProblem(line, text))

    line_no = 0
    lines = _lines(chunks, max_line_bytes, digest)
    pending: tuple[bytes | None, int] | None = next(lines, None)
    while pending is not None:
        raw, result.size_bytes = pending
        pending = next(lines, None)
        if pending is None:
            break  # the sentinel
        line_no += 1
        if raw is None:
            problem(line_no, f"line is longer than {max_line_bytes} bytes")
            continue
        if line_no == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            problem(line_no, f"not valid UTF-8 (byte {e.start + 1})")
            continue
        if not text.strip():
            continue
        try:
            row = bounded_loads(text)
        except ValueError as e:
            problem(line_no, f"not valid JSON: {e}")
            continue
        fmt, why = row_format(row)
        if why is not None:
            problem(line_no, why)
            continue
        if result.format is None:
            result.format, first_row_line = fmt, line_no
        elif fmt != result.format:
            problem(line_no, f"a {fmt} row in a {result.format} file (line {first_row_line})")
            continue
        result.row_count += 1
        if on_row is not None:
            on_row(line_no, row)
    result.sha256 = digest.hexdigest()
    if result.row_count == 0 and result.problem_count == 0:
        problem(0, "the file has no rows")
    return result
