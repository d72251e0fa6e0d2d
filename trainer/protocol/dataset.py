"""Dataset rows (P1): the one rule set the control plane checks at upload and the trainer again.

JSONL, UTF-8, one JSON object per line, blank lines ignored. Either chat rows in OpenAI's format
`{"messages": [{"role": "system"|"developer"|"user"|"assistant"|"tool", "content": "..."}...]}`
(assistant messages may carry `tool_calls` and a `weight` of 0 or 1; tool results name their
call by `tool_call_id`) with at least one assistant message to learn from, or
`{"prompt": "...", "completion": "..."}` with a non-empty completion; one file holds one format.
Every assistant message whose weight is not 0 is trained. Whether the base model's chat template
can render a row is checked where the template is known (the trainer), with the row's line.
The check streams over byte chunks in bounded memory (one line at a time, each at most
`max_line_bytes`) and computes size and sha256 in the same pass. Problems are plain words with
their line number, never a parser's message.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from trainer.protocol.bounded import JsonTooDeep, bounded_loads

CHAT = "chat"
PROMPT_COMPLETION = "prompt_completion"
ROLES = ("system", "developer", "user", "assistant", "tool")
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
    learned = False
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            return f"messages[{i}] is not an object"
        why = _message_problem(m)
        if why is not None:
            return f"messages[{i}] {why}"
        learned = learned or trained(m)
    if learned:
        return None
    return "no assistant message to learn from (each is empty or has weight 0)"


def _message_problem(m: dict[str, Any]) -> str | None:
    role = m.get("role")
    if role not in ROLES:
        return "role must be one of " + ", ".join(ROLES)
    if role == "assistant" and m.get("tool_calls") is not None:
        why = _tool_calls_problem(m["tool_calls"])
        if why is None and m.get("content") is not None and not isinstance(m["content"], str):
            why = "content must be a string or null"
    elif "tool_calls" in m:
        why = "has tool_calls, which only an assistant message may have"
    else:
        why = None if isinstance(m.get("content"), str) else "content must be a string"
    if why is None and "weight" in m:
        if role != "assistant":
            why = "has a weight, which only an assistant message may have"
        elif m["weight"] not in (0, 1) or isinstance(m["weight"], bool | float):
            why = "weight must be 0 or 1"
    if why is None and role == "tool" and not isinstance(m.get("tool_call_id", ""), str):
        why = "tool_call_id must be a string"
    return why


def _tool_calls_problem(calls: Any) -> str | None:
    if not isinstance(calls, list) or not calls:
        return "tool_calls must be a non-empty list"
    for j, call in enumerate(calls):
        if (why := _tool_call_problem(call)) is not None:
            return f"tool_calls[{j}] {why}"
    return None


def _tool_call_problem(call: Any) -> str | None:
    if not isinstance(call, dict):
        return "is not an object"
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        return 'needs a "function" with a "name"'
    if not function["name"]:
        return "has an empty function name"
    if not isinstance(function.get("arguments", ""), str | dict):
        return "arguments must be a JSON string or an object"
    return None


def trained(message: dict[str, Any]) -> bool:
    """An assistant message the loss learns: it says something (text or a tool call) and its
    weight is not 0."""
    if message.get("role") != "assistant" or message.get("weight", 1) == 0:
        return False
    content = message.get("content")
    return bool(message.get("tool_calls")) or (isinstance(content, str) and bool(content.strip()))


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


# The json module's messages, in plain words (a user fixing line 812 needs what and where).
_JSON_WORDS = (
    ("Expecting value", "a value is missing or is not JSON (strings need double quotes)"),
    ("Expecting ',' delimiter", "a comma is missing between two items"),
    ("Expecting ':' delimiter", "a colon is missing after a key"),
    ("Expecting property name", "a key must be in double quotes (or a comma is one too many)"),
    ("Unterminated string", "a string is not closed with a double quote"),
    ("Invalid control character", "a string holds a raw line break or tab (write \\n or \\t)"),
    ("Extra data", "there is more than one JSON value on the line"),
    ("Invalid \\escape", "a backslash starts an escape JSON does not know"),
    ("Invalid \\u", "a \\u escape is not four hex digits"),
)


def parse_row(text: str) -> tuple[Any, str | None]:
    """(the line's JSON value, None) or (None, what is wrong in plain words and where)."""
    try:
        return bounded_loads(text), None
    except JsonTooDeep as e:
        return None, f"not valid JSON: it is {e}"
    except json.JSONDecodeError as e:
        words = next((w for k, w in _JSON_WORDS if e.msg.startswith(k)), "it is not JSON")
        return None, f"not valid JSON at column {e.colno}: {words}"
    except (ValueError, RecursionError):
        return None, "not valid JSON: it is nested too deeply or holds a number too large"


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
        row, why = parse_row(text)
        if why is not None:
            problem(line_no, why)
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
