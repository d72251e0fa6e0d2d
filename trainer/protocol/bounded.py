"""Bounds on what arrives from outside (N6): integers that fit a store's signed 64-bit column,
and JSON parsed with a nesting limit.

Python's integers and its recursive JSON parser have no limits of their own: a report's `seq`
of 2**63 overflowed SQLite's INTEGER, and a line nested 100,000 deep raised `RecursionError`
(not `ValueError`), which every reader let through as a 500 or a failed tick. Both are refused
here, in plain words, as the `ValueError` every reader already handles.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_INT = 2**63 - 1  # the largest integer a signed 64-bit column (SQLite, PostgreSQL) holds
MAX_JSON_DEPTH = 64  # a report, a dataset row or a status file nests a handful of levels
_SPECIAL = re.compile(r'[\[\]{}"\\]')


class JsonTooDeep(ValueError):
    """JSON nested deeper than the limit: refused before it is parsed."""


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in `text` (strings skipped), without recursion:
    only the few characters that open, close or quote are visited."""
    depth = deepest = 0
    in_string = False
    escaped_at = -1
    for match in _SPECIAL.finditer(text):
        at, char = match.start(), match.group()
        if in_string:
            if at == escaped_at:
                continue
            if char == "\\":
                escaped_at = at + 1
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def bounded_loads(data: str | bytes, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """`json.loads`, refusing (JsonTooDeep, a ValueError) JSON nested deeper than `max_depth`."""
    text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
    # Counting brackets is one C pass; the exact scan runs only when there are enough of them.
    if text.count("[") + text.count("{") > max_depth and json_depth(text) > max_depth:
        raise JsonTooDeep(f"nested deeper than {max_depth} levels")
    return json.loads(text)


def bounded_int(value: Any, what: str) -> int:
    """`value` when it is an integer from 0 to MAX_INT; else a ValueError saying so."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_INT:
        raise ValueError(f"{what} must be an integer from 0 to {MAX_INT}")
    return value
