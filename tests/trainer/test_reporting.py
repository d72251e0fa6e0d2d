"""T1: the reporter's channels: mailbox order and heartbeat, callbacks that never hold up
training, log batches a retry cannot duplicate."""

from __future__ import annotations

import io
import itertools
import json
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import pytest

from tests.trainer.fixtures import HYPERPARAMETERS, CallbackStub, make_workspace, run_in_process
from trainer.callbacks import CallbackSender
from trainer.protocol import Exported, Progress, Status, parse_report_line
from trainer.reporter import Reporter


class RecordingMailbox:
    def __init__(self) -> None:
        self.writes: list[tuple[str, bytes]] = []
        self.lock = threading.Lock()

    def write_status(self, data: bytes) -> None:
        with self.lock:
            self.writes.append(("status", data))

    def write_log_chunk(self, boot: str, first_seq: int, data: bytes) -> None:
        with self.lock:
            self.writes.append((f"log-{first_seq}", data))

    def write_result(self, data: bytes) -> None:
        with self.lock:
            self.writes.append(("result", data))

    def has_result(self) -> bool:
        return any(kind == "result" for kind, _ in self.writes)


def test_status_json_is_rewritten_every_heartbeat_and_result_json_is_written_last(
    tmp_path: Path,
) -> None:
    mailbox = RecordingMailbox()
    out = io.StringIO()
    reporter = Reporter(
        "run-1",
        mailbox,
        final_record=tmp_path / "final.json",
        heartbeat_s=0.1,
        log_flush_s=60,
        out=out,
    )
    reporter.progress("training", 1, 10, loss=2.0, force=True)
    reporter.log("first line")
    deadline = time.monotonic() + 10
    while sum(kind == "status" for kind, _ in mailbox.writes) < 4 and time.monotonic() < deadline:
        time.sleep(0.02)
    statuses = [Status.from_json(json.loads(d)) for k, d in list(mailbox.writes) if k == "status"]
    assert len(statuses) >= 4, "status.json was not rewritten every heartbeat"
    assert len({s.updated_at for s in statuses}) >= 3
    assert {s.progress.step for s in statuses[1:]} == {1}
    reporter.log("last line")
    final = reporter.exported("runs/run-1/adapter.zip", "ab" * 32, 123, partial=False)
    kinds = [kind for kind, _ in mailbox.writes]
    assert kinds[-1] == "result" and kinds.count("result") == 1
    assert any(k.startswith("log-") for k in kinds[:-1])  # the waiting lines went out first
    assert (tmp_path / "final.json").exists()
    lines = [parse_report_line(x) for x in out.getvalue().splitlines()]
    assert lines[-1] == final
    assert any(r is not None and r.type == "heartbeat" for r in lines)
    reporter.close()


@pytest.fixture
def flaky_stub(callback_stub: CallbackStub) -> Iterator[CallbackStub]:
    callback_stub.requests.clear()
    yield callback_stub
    callback_stub.status = 202


def test_a_retried_log_batch_is_resent_unchanged_and_4xx_answers_are_not_retried(
    flaky_stub: CallbackStub,
) -> None:
    from trainer.protocol import Log

    flaky_stub.status = 503
    sender = CallbackSender(flaky_stub.url, "run-1", "tok", timeout_s=2)
    for seq in range(1, 1203):
        sender.publish(Log(boot="b", seq=seq, time="t", text=f"line {seq}"))
    deadline = time.monotonic() + 10
    while len(flaky_stub.requests) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    flaky_stub.status = 202
    assert sender.drain(15)
    batches = flaky_stub.bodies("/logs")
    # The failed attempt and its retry are the same body, even though more lines queued
    # meanwhile: a stored-but-unanswered batch is never stored twice under another id.
    assert batches[0] == batches[1]
    assert all(len(b["lines"]) <= 1000 for b in batches)
    stored = {b["batch"]: b["lines"] for b in batches}  # what the control plane keeps (by id)
    assert all(b == batches[0] for b in batches if b["batch"] == batches[0]["batch"])
    delivered = [line["seq"] for lines in stored.values() for line in lines]
    assert sorted(delivered) == list(range(1, 1203))  # each line stored exactly once
    flaky_stub.requests.clear()
    flaky_stub.status = 422
    sender.publish(Progress(boot="b", seq=9999, time="t", phase="training", step=1, total_steps=2))
    assert sender.drain(5)
    assert len(flaky_stub.requests) == 1  # refused for good: dropped, the mailbox has it
    sender.close()


def test_a_slow_callback_url_drops_no_training_point_only_stale_progress_of_other_phases(
    flaky_stub: CallbackStub,
) -> None:
    """R17: every training report is a point of the curve, so the fast path keeps each of them
    in order while the control plane does not answer; any other queued progress is replaced by
    the next report (the mailbox keeps them all either way)."""
    flaky_stub.status = 503
    sender = CallbackSender(flaky_stub.url, "run-1", "tok", timeout_s=2)

    def progress(seq: int, phase: str, step: int = 0) -> Progress:
        return Progress(boot="b", seq=seq, time="t", phase=phase, step=step, total_steps=3)

    sender.publish(progress(1, "downloading_model"))  # in flight, retried while refused
    deadline = time.monotonic() + 10
    while not flaky_stub.requests and time.monotonic() < deadline:
        time.sleep(0.01)
    for seq, phase, step in [
        (2, "downloading_model", 0),
        (3, "downloading_model", 0),
        (4, "training", 1),
        (5, "training", 2),
        (6, "training", 3),
        (7, "exporting", 3),
        (8, "exporting", 3),
    ]:
        sender.publish(progress(seq, phase, step))
    flaky_stub.status = 202
    assert sender.drain(15)
    sender.close()
    sent = [(b["seq"], b["phase"]) for b in flaky_stub.bodies("/progress")]
    delivered = list(dict.fromkeys(sent))  # the refused attempts of seq 1 repeat it
    assert delivered == [  # 2 and 3 are replaced by a newer report, as 7 is
        (1, "downloading_model"),
        (4, "training"),
        (5, "training"),
        (6, "training"),
        (8, "exporting"),
    ], sent


@pytest.fixture
def hanging_url() -> Iterator[str]:
    """A port that accepts connections and never answers (the worst case for timeouts)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    listener.close()


def _step_seconds(progress: list[Progress]) -> list[float]:
    times = [datetime.fromisoformat(r.time.replace("Z", "+00:00")) for r in progress]
    return [(b - a).total_seconds() for a, b in itertools.pairwise(times)]


def test_a_hanging_callback_url_does_not_slow_or_stop_training(
    tiny_model: Path, tmp_path: Path, hanging_url: str
) -> None:
    ws = make_workspace(
        tmp_path / "workspace",
        tiny_model,
        callback_url=hanging_url,
        hyperparameters=replace(HYPERPARAMETERS, max_steps=6),
    )
    # The URL never answers: a report that waited on it would wait the whole 30 s timeout.
    settings = ws.with_tunables(callback_timeout_s=30.0)
    started = time.monotonic()
    result, lines = run_in_process(ws, settings)
    elapsed = time.monotonic() - started
    assert isinstance(result.final, Exported) and result.final.partial is False
    reporter = result.reporter
    # A report that waited on the URL would take the 30 s timeout; a loaded machine (the suite's
    # in-process servers share the GIL) can still delay an emit by a few hundred ms.
    assert reporter.max_emit_s < 1.0, reporter.max_emit_s
    assert reporter._callbacks is not None and reporter._callbacks.sent == 0
    steps = [
        r
        for r in (parse_report_line(x) for x in lines)
        if isinstance(r, Progress) and r.phase == "training" and r.loss is not None
    ]
    assert [r.step for r in steps] == list(range(1, 7))
    # Had a report waited on the URL, every step would take the 30 s timeout at least; a step of
    # the tiny model takes well under a second alone and a few seconds on a loaded machine.
    assert statistics.median(_step_seconds(steps)) < 15.0, _step_seconds(steps)
    assert elapsed < 120
