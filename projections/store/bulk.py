"""A view rebuilt in memory, written in bulk (the rebuild path of `projections.store.engine`).

The live path applies each batch of events to a `ViewBatch` that loads documents from the
database and flushes them with the position in one transaction. A rebuild starts from an empty
view, so nothing needs loading: `RebuildBatch` keeps the working set in memory, and
`take_changes` hands what changed since its last call to a `BulkWriter` (one transaction for the
whole rebuild) as encoded JSON: new documents to bulk-load, rewritten ones to replace, deleted
ones to remove. It keeps the JSON it handed over, so a later event that reads a document it no
longer holds as a dict gets it back decoded, exactly as a live batch reads it from the database
(a JSON round trip, so views see the same values either way).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from types import TracebackType

from projections.store.base import Doc, DocKey, DocKeys, Upserts, ViewBatch

_NONE: dict[str, str] = {}


class RebuildBatch(ViewBatch):
    """The in-memory working set of one view being rebuilt from an empty view."""

    def __init__(self, view: str) -> None:
        super().__init__(view, 0)
        # org_id -> key -> the JSON handed to the writer: what the transaction holds.
        self._written: dict[str, dict[str, str]] = {}

    def _load(self, keys: DocKeys) -> dict[DocKey, Doc]:
        found: dict[DocKey, Doc] = {}
        written = self._written
        for k in keys:
            text = written.get(k[0], _NONE).get(k[1])
            if text is not None:
                found[k] = json.loads(text)
        return found

    def _load_prefix(self, org_id: str, prefix: str) -> Iterator[tuple[str, Doc]]:
        docs = self._written.get(org_id, _NONE)
        return (
            (key, json.loads(text)) for key, text in sorted(docs.items()) if key.startswith(prefix)
        )

    def take_changes(self) -> tuple[Upserts, Upserts, DocKeys]:
        """(inserts, updates, deletes) since the last call; forgets the working set."""
        inserts: Upserts = []
        updates: Upserts = []
        deletes: DocKeys = []
        written, work, encode = self._written, self._work, self.text_of
        for k in self._dirty:
            org_id, key = k
            docs = written.get(org_id)
            if docs is None:
                docs = written[org_id] = {}
            doc = work[k]
            if doc is None:
                if docs.pop(key, None) is not None:
                    deletes.append(k)
                continue
            text = encode(k, doc)
            (updates if key in docs else inserts).append((org_id, key, text))
            docs[key] = text
        self._dirty.clear()
        self._work.clear()
        self._texts.clear()
        return inserts, updates, deletes

    def document_count(self) -> int:
        """Documents the view holds (as handed over so far)."""
        return sum(map(len, self._written.values()))

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Nothing to flush: the rebuild hands changes to its writer itself."""
