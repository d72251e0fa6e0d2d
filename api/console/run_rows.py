"""The rows of the console's runs page, each rendered once per distinct run.

A row is the `run_row` macro (`_run_row.html`) of one run as the API shows it, a function of
that run alone; it is kept keyed by the run's JSON (`api.run_list.presented_runs`), which holds
every field the row shows. A changed run is a different JSON text, so a kept row cannot be stale;
the page around the rows (the caller, the organization, the CSRF token) is rendered on every
request. Profiled under wrk (bench/api_load.py): Jinja escaping and rendering 100 rows was the
largest part of the page's own CPU. The map is bounded (least recently used rows go first).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from functools import cache

from markupsafe import Markup

from api.console.web import TEMPLATES
from api.schemas.runs import RunPublic

MAX_ROWS = 5_000


@cache
def _run_row() -> Callable[[RunPublic], Markup]:
    macro: Callable[[RunPublic], Markup] = TEMPLATES.env.get_template(
        "_run_row.html"
    ).module.run_row  # type: ignore[attr-defined]
    return macro


class _Rows:
    def __init__(self, size: int) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._items: OrderedDict[bytes, Markup] = OrderedDict()

    def row(self, run: RunPublic, body: bytes) -> Markup:
        with self._lock:
            html = self._items.get(body)
            if html is not None:
                self._items.move_to_end(body)
                return html
        html = _run_row()(run)  # Markup: escaped by the template's autoescape
        with self._lock:
            self._items[body] = html
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return html


_ROWS = _Rows(MAX_ROWS)


def run_rows(shown: list[tuple[RunPublic, bytes]]) -> list[Markup]:
    """The `<tr>` of each run, in order (`shown`: runs with their JSON, from `presented_runs`)."""
    return [_ROWS.row(run, body) for run, body in shown]
