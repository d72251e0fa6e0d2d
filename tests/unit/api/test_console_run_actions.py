"""The console's run page offers what the run allows (`domain.run.allowed_actions`, the API's
`actions` flags), not a list of state names of its own: a recovering run can be cancelled, a
cancelled run with its Pod retained can be resumed or released but not recovered."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from api.console.web import TEMPLATES
from api.schemas.runs import RunPublic
from projections.views.runs import apply_event, new_doc, present_run
from tests.unit.projections.test_run_life_cycle import record

T0 = datetime(2026, 11, 1, tzinfo=UTC)

BUTTONS = {
    "launch": "Launch trial",
    "edit": "Edit draft",
    "delete": "Discard draft",
    "cancel": "Cancel run",
    "resume": "Resume Pod",
    "release": "Release Pod",
    "recover_verify": "Verify the saved adapter",
}


def shown(path: list[str]) -> RunPublic:
    """The run as the API shows it after the commands of `path`."""
    events = record([(name, 0) for name in path])
    doc: dict[str, Any] = new_doc("run-1", events[0])  # type: ignore[arg-type]
    for event in events[1:]:
        apply_event(doc, event)
    return RunPublic(**present_run(doc, T0 + timedelta(hours=1)))


def page(run: RunPublic, storage_kind: str = "runpod_volume") -> str:
    return TEMPLATES.env.get_template("run.html").render(
        run=run,
        caller=None,
        org=None,
        csrf="c",
        can=lambda permission: True,
        path=f"/runs/{run.id}",
        errors={},
        history=[],
        storage={"kind": storage_kind},
        terminal=False,
    )


def buttons(html: str) -> set[str]:
    """The actions whose button (or link) the page shows."""
    return {a for a, text in BUTTONS.items() if re.search(f">{text}</(button|a)>", html)}


@pytest.mark.parametrize(
    ("path", "state", "offered"),
    [
        ([], "draft", {"launch", "edit", "delete"}),
        (["confirm", "pod"], "running", {"cancel"}),
        (["confirm", "pod", "export_failed", "stopped"], "needs_recovery",
         {"cancel", "resume", "release", "recover_verify"}),
        (["confirm", "pod", "export_failed", "stopped", "recover"], "recovering", {"cancel"}),
        (["confirm", "pod", "export_failed", "stopped", "cancel"], "cancelled",
         {"resume", "release"}),
        (["confirm", "pod", "cancel"], "cancelling", set()),
        (["confirm", "pod", "train", "exported", "verified", "terminated"], "succeeded", set()),
    ],
)  # fmt: skip
def test_the_run_page_offers_the_runs_allowed_actions(
    path: list[str], state: str, offered: set[str]
) -> None:
    run = shown(path)
    assert run.state == state
    assert buttons(page(run)) == offered
    flags = {a for a, allowed in run.actions.model_dump().items() if allowed}
    # no button of its own: upload (custom S3, the next test), and cancelling a draft (it is
    # discarded instead)
    unshown = {"recover_upload"} | ({"cancel"} if state == "draft" else set())
    assert buttons(page(run)) == flags - unshown


def test_custom_s3_recovers_by_upload_and_only_while_the_run_allows_it() -> None:
    needs = shown(["confirm", "pod", "export_failed", "stopped"])
    html = page(needs, "s3")
    assert "Verify and recover" in html and "Verify the saved adapter" not in html
    cancelled = shown(["confirm", "pod", "export_failed", "stopped", "cancel"])
    assert "Verify and recover" not in page(cancelled, "s3")
