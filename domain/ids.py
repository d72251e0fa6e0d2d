"""The text of ids, kept for the ids met lately.

A rebuild applies each event to several views, and each one wrote `str(event.originator_id)`
again (0.55 µs a call; 5.9% of a rebuild's CPU in the profile of 2026-12-06). A UUID's text
cannot change, so the texts of the 65,536 UUIDs met last are kept (cleared when full).
"""

from __future__ import annotations

from uuid import UUID

_TEXTS: dict[int, str] = {}  # a UUID's 128-bit number -> its text
_TEXTS_MAX = 65_536


def id_text(value: object) -> str:
    """`str(value)`; for a UUID, the text kept from an earlier call when there is one.

    Kept by the UUID's number: hashing and comparing a UUID runs Python (`UUID.__hash__`,
    `__eq__`), its `int` is a slot, and an int hashes in C (a rebuild's reader makes a new UUID
    per row, so every look-up compared two UUIDs): 0.2-0.3 s less apply CPU in each of the two
    rebuild processes of bench/projection_rebuild.py's 1M events (of 5.2-7.0 s)."""
    if type(value) is not UUID:
        return str(value)
    number = value.int
    try:
        return _TEXTS[number]
    except KeyError:
        pass
    text = str(value)
    if len(_TEXTS) >= _TEXTS_MAX:
        _TEXTS.clear()
    _TEXTS[number] = text
    return text
