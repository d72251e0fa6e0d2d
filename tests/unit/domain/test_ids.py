from __future__ import annotations

from uuid import UUID, uuid4

from domain import ids
from domain.ids import id_text


def test_the_text_is_str_of_the_value_whatever_it_is() -> None:
    u = uuid4()
    assert id_text(u) == str(u)
    assert id_text(u) == str(u)  # again, kept
    assert id_text(UUID(str(u))) == str(u)  # an equal UUID shares the text
    assert id_text("org-1") == "org-1"
    assert id_text(7) == "7"
    assert id_text(["x"]) == "['x']"  # unhashable: str() all the same


def test_only_uuids_are_kept_and_at_most_the_bound() -> None:
    ids._TEXTS.clear()
    id_text("not kept")
    id_text(12)
    assert ids._TEXTS == {}
    for _ in range(ids._TEXTS_MAX + 3):
        u = uuid4()
        assert id_text(u) == str(u)
    assert 0 < len(ids._TEXTS) <= ids._TEXTS_MAX
    assert all(text == str(UUID(int=key)) for key, text in ids._TEXTS.items())
