"""`API_PROJECTORS=false`: an API process of a deployment whose views a `tensorant projector`
keeps. A request still shows its own writes (it applies them itself); what the workers record
shows once a projector runs, and the API spends nothing on it meanwhile."""

from __future__ import annotations

import pytest

from domain.run import SUCCEEDED, Run
from tests.e2e.flows import draft, launch, private_stack, ready, until


def test_an_api_without_projectors_shows_its_writes_and_the_projector_the_workers(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with private_stack(
        tmp_path_factory, "no-api-projectors", settings={"api_projectors": False}
    ) as (api, _console):
        org, config = ready(api, api.sandbox.credentials())
        run = draft(org, config)  # the request's own write, shown in its answer and after
        assert org.member.get(f"/v1/runs/{run['id']}").json()["state"] == "draft"
        launch(org, run["id"])
        log = api.container.services.log
        until(lambda: log.load(Run, run["id"]).state == SUCCEEDED, 60, "the run to succeed")
        shown = org.member.get(f"/v1/runs/{run['id']}").json()["state"]
        assert shown != "succeeded", "the API process projected the worker's events"
        api.container.projections.run_once()  # what `tensorant projector` does
        assert org.member.get(f"/v1/runs/{run['id']}").json()["state"] == "succeeded"
