"""T1: SIGTERM (stop, runtime limit) mid-training, in a real process started the way the Pod
starts it (the console script): the trainer writes the partial adapter, reports it partial, and
exits within a short grace period."""

from __future__ import annotations

import json

from domain.lora import Architecture, verify_adapter
from tests.trainer.fixtures import PodProcess
from trainer.protocol import Exported, parse_report_line, report_from_json


def test_sigterm_mid_training_writes_a_partial_adapter_and_reports_it_partial(
    pod_process: PodProcess,
) -> None:
    assert pod_process.done.wait(300), "".join(pod_process.lines[-20:])
    assert pod_process.sigterm_at is not None, "the trainer never reported training step 3"
    assert pod_process.code == 0
    assert pod_process.exit_seconds is not None and pod_process.exit_seconds < 10
    ws = pod_process.workspace
    reports = [r for r in (parse_report_line(x) for x in pod_process.lines) if r is not None]
    final = reports[-1]
    assert isinstance(final, Exported) and final.partial is True
    assert report_from_json(json.loads(ws.path("runs/run-1/result.json").read_text())) == final
    config = json.loads((ws.path("models/tiny") / "config.json").read_text())
    with ws.path("data/adapter.zip").open("rb") as f:
        summary = verify_adapter(
            f,
            base_model="storage:models/tiny",
            architecture=Architecture.from_config(config),
            sha256=final.sha256,
            size_bytes=final.size_bytes,
        )
    assert summary.metrics is not None and summary.metrics["partial"] is True
    assert 3 <= summary.metrics["step"] < 100_000
    assert ws.path(final.object_key).read_bytes() == ws.path("data/adapter.zip").read_bytes()
