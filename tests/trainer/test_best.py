"""R17 evaluation: the best checkpoint keeps the weights of the lowest eval loss offered, survives
a restart of the trainer, and puts exactly those weights back (a tiny torch module, no model)."""

from __future__ import annotations

from pathlib import Path

from trainer.best import BestCheckpoint


def test_the_lowest_eval_loss_is_kept_restored_and_found_again_after_a_restart(
    tmp_path: Path,
) -> None:
    import torch

    model = torch.nn.Linear(3, 2)
    model.bias.requires_grad_(False)  # only trainable weights are kept, as LoRA's are
    best = BestCheckpoint(tmp_path / "best")
    weights_at: dict[int, torch.Tensor] = {}
    for step, loss in [(1, 2.0), (2, 1.5), (3, 1.7), (4, None), (5, 1.5)]:
        with torch.no_grad():
            model.weight.add_(1.0)
        weights_at[step] = model.weight.detach().clone()
        best.offer(model, step, loss)
    assert (best.step, best.eval_loss) == (2, 1.5)  # a tie or a worse loss keeps the first
    assert sorted(p.name for p in (tmp_path / "best").iterdir()) == ["best.json", "step-2"]

    again = BestCheckpoint(tmp_path / "best")  # a restarted trainer reads it from the volume
    assert (again.step, again.eval_loss) == (2, 1.5)
    bias = model.bias.detach().clone()
    again.restore(model)
    assert torch.equal(model.weight, weights_at[2]) and torch.equal(model.bias, bias)
    assert again.offer(model, 6, 1.0) and again.step == 6
    assert not (tmp_path / "best" / "step-2").exists()
