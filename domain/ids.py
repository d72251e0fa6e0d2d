"""The text of ids, kept for the ids met lately.

A rebuild applies each event to several views, and each one wrote `str(event.originator_id)`
again (0.55 µs a call; 5.9% of a rebuild's CPU in the profile of 2026-12-06). A UUID's text
cannot change, so the texts of the 65,536 UUIDs met last are kept (cleared when full).
"""

from __future__ import annotations

from uuid import UUID

_TEXTS: dict[UUID, str] = {}
_TEXTS_MAX = 65_536


def id_text(value: object) -> str:
    """`str(value)`; for a UUID, the text kept from an earlier call when there is one."""
    try:
        return _TEXTS[value]  # type: ignore[index]
    except KeyError:
        pass
    except TypeError:  # unhashable: not an id, but str() says what it is
        return str(value)
    text = str(value)
    if type(value) is UUID:
        if len(_TEXTS) >= _TEXTS_MAX:
            _TEXTS.clear()
        _TEXTS[value] = text
    return text
