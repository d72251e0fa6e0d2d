"""T1: RunPod restarts a container that exits; a restarted trainer idles when it already
reported, and otherwise resumes from its last complete checkpoint (never a half-written one)."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.fixtures import TrainedRun, make_workspace, run_in_process
from trainer.checkpoint import CheckpointStore
from trainer.loop import Training
from trainer.protocol import Exported, Progress, parse_report_line


class SimulatedCrash(BaseException):
    """Like a killed process: nothing catches it, nothing reports it."""


def test_a_restarted_trainer_that_finds_its_final_report_idles_at_once(
    trained_run: TrainedRun,
) -> None:
    ws = trained_run.workspace
    result_json = ws.path("runs/run-1/result.json")
    adapter = ws.path("data/adapter.zip").read_bytes()
    status = ws.path("runs/run-1/status.json").read_bytes()
    logs = sorted(ws.path("runs/run-1/logs").iterdir())
    result, lines = run_in_process(ws)
    assert result.already_finished
    assert result.final == trained_run.result.final  # the same boot and seq: applied once
    reports = [r for r in (parse_report_line(x) for x in lines) if r is not None]
    assert reports[-1] == trained_run.result.final
    assert not [r for r in reports if isinstance(r, Progress)]  # no training again
    assert ws.path("data/adapter.zip").read_bytes() == adapter
    assert ws.path("runs/run-1/status.json").read_bytes() == status  # the mailbox is untouched
    assert sorted(ws.path("runs/run-1/logs").iterdir()) == logs
    assert json.loads(result_json.read_text()) == trained_run.result.final.to_json()
    assert ws.path(".tensorant-trainer/run-1/attempts").read_text() == "2"


def _weights(zip_path: Path) -> bytes:
    with zipfile.ZipFile(zip_path) as z:
        return z.read("adapter_model.safetensors")


def test_a_restarted_trainer_without_a_result_resumes_from_its_last_complete_checkpoint(
    trained_run: TrainedRun, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = make_workspace(tmp_path / "workspace", tiny_model)
    settings = ws.with_tunables(checkpoint_steps=8)
    real_checkpoint = Training._checkpoint
    saved: list[int] = []

    def crash_after_second_checkpoint(self: Training) -> None:
        real_checkpoint(self)
        saved.append(self.outcome.step)
        if len(saved) == 2:
            raise SimulatedCrash

    monkeypatch.setattr(Training, "_checkpoint", crash_after_second_checkpoint)
    with pytest.raises(SimulatedCrash):
        run_in_process(ws, settings)
    monkeypatch.undo()
    assert saved == [8, 16]
    assert not ws.path("runs/run-1/result.json").exists()
    # What a kill during the next checkpoint leaves behind: never read.
    root = ws.path(".tensorant-trainer/run-1/checkpoints")
    (root / ".tmp-00000020-deadbeef").mkdir()
    torn = root / "step-00000020"
    (torn).mkdir()
    (torn / "adapter.safetensors").write_bytes(b"half")
    store = CheckpointStore(root)
    assert store.latest() == root / "step-00000016"

    result, lines = run_in_process(ws, settings)
    assert result.resumed_from == 16 and isinstance(result.final, Exported)
    assert result.final.partial is False
    reports = [r for r in (parse_report_line(x) for x in lines) if r is not None]
    trained = sorted({r.step for r in reports if isinstance(r, Progress) and r.loss is not None})
    assert trained == list(range(17, 25))
    assert any("resumed from the checkpoint at step 16" in getattr(r, "text", "") for r in reports)
    # Resuming is exact: the same weights as the run that was never interrupted.
    assert _weights(ws.path("data/adapter.zip")) == _weights(
        trained_run.workspace.path("data/adapter.zip")
    )


def test_an_interrupted_loop_is_exported_as_partial_never_as_complete(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """train() returns normally after a stop; the step count decides what it was."""
    from trainer.run import run
    from trainer.stop import StopSignal

    ws = make_workspace(tmp_path / "workspace", tiny_model)
    stop = StopSignal()
    real_run = Training.run

    def stop_after_three_steps(self: Training) -> Any:
        original = self.on_progress

        def progress(o: Any, lr: float, tps: float) -> bool:
            if o.step == 3:
                stop.requested = True
            return original(o, lr, tps)

        self.on_progress = progress
        return real_run(self)

    monkeypatch.setattr(Training, "run", stop_after_three_steps)
    out = io.StringIO()
    result = run(ws.settings, stop, out=out)
    assert result.reporter is not None
    result.reporter.close()
    assert isinstance(result.final, Exported) and result.final.partial is True
    with zipfile.ZipFile(ws.path("data/adapter.zip")) as z:
        metrics = json.loads(z.read("tensorant.json"))
    assert (metrics["partial"], metrics["step"], metrics["total_steps"]) == (True, 3, 24)
