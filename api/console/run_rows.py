"""The rows of the console's runs page, each rendered once per distinct run.

A row is the `run_row` macro (`_run_row.html`) of one run as the API shows it, a function of
that run alone; it is kept keyed by the run's JSON (`api.run_list.presented_runs`), which holds
every field the row shows. A changed run is a different JSON text, so a kept row cannot be stale;
the page around the rows (the caller, the organization, the CSRF token) is rendered on every
request. Profiled under wrk (bench/api_load.py): Jinja escaping and rendering 100 rows was the
largest part of the page's own CPU. The map is bounded (least recently used rows go first).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from operator import is_

from markupsafe import Markup

from api.console.web import TEMPLATES
from api.schemas.runs import RunPublic
from projections.store.lru import Lru

MAX_ROWS = 5_000
MAX_LISTS = 64  # ~100 KB each at 100 runs


@cache
def _run_row() -> Callable[[RunPublic], Markup]:
    macro: Callable[[RunPublic], Markup] = TEMPLATES.env.get_template(
        "_run_row.html"
    ).module.run_row  # type: ignore[attr-defined]
    return macro


_ROWS: Lru[bytes, Markup] = Lru(MAX_ROWS)  # a run's JSON -> its row


def _row(run: RunPublic, body: bytes) -> Markup:
    html = _ROWS.get(body)
    if html is None:
        html = _run_row()(run)  # Markup: escaped by the template's autoescape
        _ROWS.put(body, html)
    return html


# The rows of a whole list, keyed by its runs' JSON objects in order (the texts the list
# kept in `presented_runs` are the same objects while nothing in it changed): an unchanged list
# is joined once, not on every request. Each entry holds its texts, so their ids stay theirs.
_LISTS: Lru[tuple[bool, tuple[int, ...]], tuple[list[bytes], Markup]] = Lru(MAX_LISTS)


def _created(item: tuple[RunPublic, bytes]) -> str:
    return item[0].created_at


def run_rows(shown: list[tuple[RunPublic, bytes]], *, newest_first: bool = False) -> Markup:
    """The `<tr>` of each run, in order (`newest_first`: by creation, newest first, as the runs
    page lists them), as one Markup (`shown`: runs with their JSON, from `presented_runs`): the
    template writes it at once, not 100 loop turns. Every row is Markup already (escaped when
    rendered), so they are joined as text: `Markup.join` would escape each again, a tenth of
    the page's CPU (py-spy under wrk, bench/api_load.py)."""
    bodies = [body for _, body in shown]
    key = (newest_first, tuple(map(id, bodies)))
    found = _LISTS.get(key)
    if found is not None and all(map(is_, found[0], bodies)):
        return found[1]
    ordered = sorted(shown, key=_created, reverse=True) if newest_first else shown
    rows = Markup("".join([_row(run, body) for run, body in ordered]))  # noqa: S704 - rows are Markup
    _LISTS.put(key, (bodies, rows))
    return rows
