"""Report channels (R6) on the REST v2 wire, with callbacks, the mailbox and Pod logs all working:
- acceptance 2 and 3: every report is applied once (the run's history has no duplicate) and the
  run's log lines are the Pod's output minus report lines, in order, although the sandbox cuts
  the log stream three times;
- acceptance 6: a trainer that dies at import shows its last stdout lines on the run;
- no report on any channel (R5, R8): a trainer that hangs after it trained is stopped and
  retained once silent for the stall time; a Pod that never reports is terminated at its boot
  deadline and its run fails.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from decimal import ROUND_UP, Decimal

import pytest

from adapters.trainer_bundle import build_bundle
from application.run_settings import PUBLIC_BASE_IMAGE
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
BOOT_DEADLINE_S = 25 * 60.0  # TENSORANT_BOOT_DEADLINE_MINUTES' default


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


def test_a_hung_trainer_is_stopped_and_retained_once_silent_for_the_stall_time(
    stack: tuple[Api, RunPodConsole],
) -> None:
    """R8: a trainer that trained and then went silent on every channel (the sandbox's `hang`:
    only plain lines reach stdout) is stopped, not terminated: its checkpoints may be the only
    copy. While silent it shows `stalled_since`; the next reconcile tick stops it."""
    api, console = stack
    org, config = ready(api, api.sandbox.credentials(), name="Hang")
    console.scenario("hang")
    run = draft(org, config)
    launch(org, run["id"])
    wait_state(org, run["id"], "running")
    body = wait_state(org, run["id"], "needs_recovery", timeout=STALL_AFTER + 30)
    assert (body["state_reason"], body["cleanup"]["pod_status"]) == ("trainer_stalled", "stopped")
    assert body["stalled_since"] is None  # stopped: no longer watched
    events = history(org, run["id"])
    (stalled,) = [e for e in events if e["type"] == "TrainerStalled"]
    assert stalled["data"]["last_report_at"]
    assert [e["data"]["reason"] for e in events if e["type"] == "PodStopped"] == ["trainer_stalled"]
    assert not {"PodTerminationRequested", "PodTerminated"} & {e["type"] for e in events}
    [pod] = console.pods_of_run(run["id"])
    assert pod["status"] == "EXITED", pod
    items = org.member.get("/v1/cleanup").json()["items"]
    assert [i["kind"] for i in items if i["run_id"] == run["id"]] == ["retained"]
    assert any("NCCL barrier" in x for x in run_log_texts(org, run["id"]))  # Pod logs flowed


def test_a_pod_that_never_reports_is_terminated_at_its_boot_deadline(
    stack: tuple[Api, RunPodConsole],
) -> None:
    """R5: a Pod whose container never starts (an image pull that never ends: the sandbox's
    start-up outlasts the deadline) is terminated at the boot deadline, confirmed gone, and its
    run fails; it billed no longer than the deadline, and nothing is left to clean up."""
    api, console = stack
    org, config = ready(api, api.sandbox.credentials(), name="Boot")
    model = api.sandbox.model
    startup, model.startup_seconds = model.startup_seconds, 2 * 3600.0
    console.freeze()  # only the advance moves time: the Pod's bill is exact
    try:
        run = draft(org, config)
        launch(org, run["id"])
        wait_state(org, run["id"], "running")
        console.advance(BOOT_DEADLINE_S)
        done = wait_state(org, run["id"], "failed", timeout=30)
    finally:
        console.freeze(False)
        model.startup_seconds = startup
    assert (done["state_reason"], done["cleanup"]["pod_status"]) == (
        "trainer_never_started",
        "terminated",
    )
    [pod] = console.pods_of_run(run["id"])
    assert pod["status"] == "TERMINATED", pod
    hourly = Decimal(done["price_per_hour"]) + Decimal(20) * Decimal("0.10") / 730
    bound = (hourly * Decimal(BOOT_DEADLINE_S) / 3600).quantize(Decimal("0.0001"), ROUND_UP)
    assert Decimal(done["cost_so_far"]) <= bound, (done["cost_so_far"], bound)
    items = org.member.get("/v1/cleanup").json()["items"]
    assert [i for i in items if i["run_id"] == run["id"]] == []
    kinds = [e["type"] for e in history(org, run["id"])]
    assert kinds[-4:] == ["BootFailed", "PodTerminationRequested", "PodTerminated", "RunFailed"]
    assert any("create container" in x for x in run_log_texts(org, run["id"]))  # its last lines


@pytest.mark.parametrize(
    ("scenario", "reason", "line"),
    [
        ("image_pull_fails", "image_unavailable", "error pulling image"),
        ("cuda_mismatch", "cuda_unavailable", "unsatisfied condition: cuda>=13.0"),
    ],
)
def test_a_pod_whose_container_never_starts_fails_with_the_reason_its_log_gives(
    stack: tuple[Api, RunPodConsole], scenario: str, reason: str, line: str
) -> None:
    """The sandbox's Pod loops on its image pull, or its host's driver
    is too old for CUDA 13; nothing ever reports. With the sandbox clock moved to the boot
    deadline, the next reconcile tick terminates the Pod (confirmed gone), the run fails with
    the reason RunPod's log gives, that line joins the run's log, the Pod billed no more than
    the deadline at its price, and nothing is left to clean up."""
    api, console = stack
    org, config = ready(api, api.sandbox.credentials(), name=scenario.title())
    console.scenario(scenario)
    console.freeze()  # only the advance moves time: the Pod's bill is exact
    try:
        run = draft(org, config)
        launch(org, run["id"])
        wait_state(org, run["id"], "running")
        [pod] = console.pods_of_run(run["id"])
        assert (pod["scenario"], pod["runtime_ready"]) == (scenario, False), pod
        # REST v2's create carried the public image and the bundle's start command (`args`)
        assert pod["image_name"] == PUBLIC_BASE_IMAGE
        assert pod["start_command"] == build_bundle().start_command
        console.advance(BOOT_DEADLINE_S)
        done = wait_state(org, run["id"], "failed", timeout=30)
    finally:
        console.freeze(False)
    assert (done["state_reason"], done["cleanup"]["pod_status"]) == (reason, "terminated")
    [pod] = console.pods_of_run(run["id"])
    assert pod["status"] == "TERMINATED", pod
    hourly = Decimal(done["price_per_hour"]) + Decimal(20) * Decimal("0.10") / 730
    bound = (hourly * Decimal(BOOT_DEADLINE_S) / 3600).quantize(Decimal("0.0001"), ROUND_UP)
    assert Decimal(done["cost_so_far"]) <= bound, (done["cost_so_far"], bound)
    assert [
        i for i in org.member.get("/v1/cleanup").json()["items"] if i["run_id"] == run["id"]
    ] == []
    kinds = [e["type"] for e in history(org, run["id"])]
    assert kinds[-4:] == ["BootFailed", "PodTerminationRequested", "PodTerminated", "RunFailed"]
    assert not {"TrainingStarted", "PodStopped"} & set(kinds)
    assert any(line in x for x in run_log_texts(org, run["id"]))


def test_a_trainer_silent_after_it_started_is_stopped_and_retained(
    stack: tuple[Api, RunPodConsole],
) -> None:
    """`silent_after_start` reports, trains two steps, then nothing on
    any channel (not even plain lines): stopped, not terminated, `trainer_stalled`."""
    api, console = stack
    org, config = ready(api, api.sandbox.credentials(), name="Silent")
    console.scenario("silent_after_start")
    run = draft(org, config)
    launch(org, run["id"])
    wait_state(org, run["id"], "running")
    body = wait_state(org, run["id"], "needs_recovery", timeout=STALL_AFTER + 30)
    assert (body["state_reason"], body["cleanup"]["pod_status"]) == ("trainer_stalled", "stopped")
    assert body["progress"]["phase"] == "training" and body["progress"]["step"] == 2
    [pod] = console.pods_of_run(run["id"])
    assert (pod["status"], pod["scenario"]) == ("EXITED", "silent_after_start"), pod
    kinds = [e["type"] for e in history(org, run["id"])]
    assert "TrainerStalled" in kinds and "PodTerminationRequested" not in kinds


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
