"""T1 memory: micro-batches by a token budget, each output freed before the next forward, and an
out of memory mid-run resumed from the last checkpoint with half the micro-batch, once."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.fixtures import HYPERPARAMETERS, make_workspace, run_in_process
from trainer.data import Example
from trainer.loop import token_groups
from trainer.protocol import Exported, Failed, Log, Progress, parse_report_line


def _rows(*lengths: int) -> list[Example]:
    return [Example(list(range(n)), list(range(n)), n - 1) for n in lengths]


def test_rows_are_grouped_within_the_token_budget_and_a_long_row_goes_alone() -> None:
    rows = _rows(30, 10, 12, 50, 11)
    assert token_groups(rows, 0) == [rows]
    groups = token_groups(rows, 40)
    assert [[len(r.input_ids) for r in g] for g in groups] == [[10, 11, 12], [30], [50]]
    assert all(len(g) * max(len(r.input_ids) for r in g) <= 40 for g in groups[:2])
    assert sorted(len(r.input_ids) for g in groups for r in g) == [10, 11, 12, 30, 50]


class FakeDevice:
    """The tiny model on a pretend GPU: a forward pass of more than `capacity` tokens (rows ×
    padded length) raises torch's OutOfMemoryError, as CUDA's allocator does; the capacity
    shrinks to `later` after `calls` forward passes (a long-running job's fragmentation)."""

    def __init__(self, model: Any, *, calls: int, later: int) -> None:
        self.model = model
        self.calls = 0
        self.switch = calls
        self.later = later
        self.sizes: list[int] = []
        self.ooms = 0

    def __call__(self, **batch: Any) -> Any:
        import torch

        self.calls += 1
        size = int(batch["input_ids"].numel())
        if self.calls > self.switch and size > self.later:
            self.ooms += 1
            raise torch.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {size} tokens' worth; 23.6 GiB in use"
            )
        self.sizes.append(size)
        return self.model(**batch)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def _with_fake_device(monkeypatch: pytest.MonkeyPatch, **limits: int) -> list[FakeDevice]:
    from trainer import model

    add_lora = model.add_lora
    made: list[FakeDevice] = []

    def on_fake_device(*args: Any, **kwargs: Any) -> Any:
        made.append(FakeDevice(add_lora(*args, **kwargs), **limits))
        return made[-1]

    monkeypatch.setattr(model, "add_lora", on_fake_device)
    return made


HP = replace(HYPERPARAMETERS, max_steps=6, micro_batch_tokens=4096)


def test_out_of_memory_mid_run_resumes_from_the_checkpoint_with_half_and_finishes(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Acceptance 6: steps 1-3 fit; from step 4 a forward of 4 rows no longer does."""
    made = _with_fake_device(monkeypatch, calls=6, later=70)
    ws = make_workspace(tmp_path / "ws", tiny_model, hyperparameters=HP)
    result, lines = run_in_process(ws, ws.with_tunables(checkpoint_steps=2))
    assert isinstance(result.final, Exported), result.final
    assert result.final.partial is False
    device = made[0]
    assert device.ooms == 1
    before, after = device.sizes[:6], device.sizes[6:]
    assert min(before) > 70  # four rows a forward pass until the out of memory
    assert after and max(after) <= max(before) // 2  # half the micro-batch from then on
    reports = [r for r in (parse_report_line(x) for x in lines) if r is not None]
    notes = [r.text for r in reports if isinstance(r, Log) and "out of memory" in r.text]
    assert len(notes) == 1 and "out of memory at step 4" in notes[0], notes
    assert "resuming from the checkpoint at step 2 with half" in notes[0], notes
    steps = [
        r.step for r in reports if isinstance(r, Progress) and r.phase == "training" and r.loss
    ]
    assert steps == [1, 2, 3, 3, 4, 5, 6]  # steps 3 onwards again, from the checkpoint


def test_a_second_out_of_memory_fails_the_run_as_out_of_memory(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _with_fake_device(monkeypatch, calls=2, later=1)  # not even one row fits later
    ws = make_workspace(tmp_path / "ws", tiny_model, hyperparameters=HP)
    result, _ = run_in_process(ws, ws.with_tunables(checkpoint_steps=2))
    assert isinstance(result.final, Failed), result.final
    assert result.final.reason == "out_of_memory"
    assert (
        "already halved once" in result.final.detail and "CUDA out of memory" in result.final.detail
    )
    assert made[0].ooms == 2
