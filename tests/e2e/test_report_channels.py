"""Issue 13 on the REST v2 wire, with callbacks, the mailbox and Pod logs all working:
- acceptance 2 and 3: every report is applied once (the run's history has no duplicate) and the
  run's log lines are the Pod's output minus report lines, in order, although the sandbox cuts
  the log stream three times;
- acceptance 6: a trainer that hangs shows `stalled_since` (and a cleanup warning) within the
  configured time; a trainer that dies at import shows its last stdout lines on the run.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.e2e.conftest import Api
from tests.e2e.flows import (
    RunPodConsole,
    draft,
    expected_log,
    history,
    launch,
    pod_output,
    private_stack,
    ready,
    run_log_texts,
    until,
    wait_state,
)
from trainer.protocol import Log, parse_report_line

pytestmark = pytest.mark.slow
STALL_AFTER = 3.0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Api, RunPodConsole]]:
    # Steps of 0.4 s (the simulated trainer's default is 0.08 s): the follower must find the
    # Pod before it is released, as it always does with a real trainer's minutes; a loaded
    # machine once took longer than a whole 0.4 s run to start following.
    with private_stack(
        tmp_path_factory,
        "channels",
        runpod_api="rest",
        stall_after=STALL_AFTER,
        sandbox={"trainer_step_seconds": 0.4},
    ) as (api, console):
        yield api, console


def test_with_every_channel_each_report_is_applied_once_despite_three_stream_cuts(
    stack: tuple[Api, RunPodConsole],
) -> None:
    api, console = stack
    console.faults(log_stream_cut_after=3, log_stream_cuts=3)
    try:
        org, config = ready(api, api.sandbox.credentials(), name="Both")
        run = draft(org, config)
        launch(org, run["id"])
        done = wait_state(org, run["id"], "succeeded", timeout=90)
    finally:
        console.faults()
    assert done["progress"]["via"] in ("callback", "mailbox", "pod_logs")
    counts = Counter(e["type"] for e in history(org, run["id"]))
    for kind in ("TrainingStarted", "ExportStarted", "AdapterExported", "AdapterVerified"):
        assert counts[kind] == 1, counts
    output = pod_output(api.sandbox, done["pod_id"])
    expected = expected_log(output)
    logged = {r.text for r in map(parse_report_line, output) if isinstance(r, Log)}
    assert any("step 5/5" in x for x in expected), expected
    reported = [x for x in expected if x in logged]
    plain = [x for x in expected if x not in logged]
    # Up to the final report every line must be there; what the Pod prints after its run left
    # the training states (the container's removal) the follower no longer reads.
    final = max(i for i, x in enumerate(output) if parse_report_line(x) is not None)
    required = Counter(expected_log(output[: final + 1]))
    try:
        until(
            lambda: not required - Counter(run_log_texts(org, run["id"])),
            timeout=60,
            what="every line of the Pod's output up to the final report",
        )
    except AssertionError as e:
        missing = list((required - Counter(run_log_texts(org, run["id"]))).elements())
        raise AssertionError(f"{e}; missing: {missing}") from None
    lines = run_log_texts(org, run["id"])
    assert not Counter(lines) - Counter(expected), "no line stored twice or made up"
    # Each channel keeps the Pod's order; a plain line (Pod logs only) may be stored after a
    # report that a faster channel brought first.
    assert [x for x in lines if x in logged] == reported
    stored_plain = [x for x in lines if x not in logged]
    assert stored_plain == plain[: len(stored_plain)]


def test_a_hung_trainer_shows_stalled_since_and_a_cleanup_warning(
    stack: tuple[Api, RunPodConsole],
) -> None:
    api, console = stack
    org, config = ready(api, api.sandbox.credentials(), name="Hang")
    console.scenario("hang")
    run = draft(org, config)
    launch(org, run["id"])
    wait_state(org, run["id"], "running")

    def stalled() -> Any:
        body = org.member.get(f"/v1/runs/{run['id']}").json()
        return body if body["stalled_since"] else None

    body = until(stalled, timeout=STALL_AFTER + 30, what="stalled_since on the hung run")
    assert body["state"] == "running"
    items = org.member.get("/v1/cleanup").json()["items"]
    (item,) = [i for i in items if i["run_id"] == run["id"]]
    assert item["warning"] and "no report" in item["warning"], item
    assert any("NCCL barrier" in x for x in run_log_texts(org, run["id"]))  # Pod logs still flow
    r = org.member.post(f"/v1/runs/{run['id']}/cancel")
    assert r.status_code == 202, r.text


def test_a_trainer_that_dies_at_import_shows_its_last_stdout_lines(
    stack: tuple[Api, RunPodConsole],
) -> None:
    api, console = stack
    org, config = ready(api, api.sandbox.credentials(), name="Crash")
    console.scenario("crash")
    run = draft(org, config)
    launch(org, run["id"])
    until(
        lambda: any("CUDA error" in x for x in run_log_texts(org, run["id"])),
        timeout=150,  # the follower backs off on errors; a loaded CI machine needed more than 40 s
        what="the crash's traceback among the run's log lines",
    )
    lines = run_log_texts(org, run["id"])
    assert "Traceback (most recent call last):" in lines
    org.member.post(f"/v1/runs/{run['id']}/cancel")
