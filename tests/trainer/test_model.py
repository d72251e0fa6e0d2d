"""T1: the model set-up the GPU path uses, exercised on the CPU."""

from __future__ import annotations

import warnings
from pathlib import Path

from trainer.model import add_lora, load_model, pick_device
from trainer.protocol import Hyperparameters


def test_the_cpu_trains_in_fp32_on_one_thread() -> None:
    import torch

    device, dtype = pick_device()
    if not torch.cuda.is_available():
        assert (device.type, dtype, torch.get_num_threads()) == ("cpu", torch.float32, 1)


def test_lora_with_activation_checkpointing_trains_only_the_adapter(tiny_model: Path) -> None:
    """On a GPU the trainer checkpoints activations; the adapter must still get gradients."""
    import torch

    _, base = load_model(tiny_model, torch.device("cpu"), torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no deprecated checkpointing call
        model = add_lora(
            base, Hyperparameters(lora_r=4, target_modules=("q_proj", "v_proj")), checkpointing=True
        )
    model.train()
    ids = torch.tensor([[1, 5, 9, 13, 17, 2]])
    model(input_ids=ids, labels=ids, num_items_in_batch=5).loss.backward()
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_" in n for n in trainable)
    assert {n.split(".")[-4] for n in trainable} == {"q_proj", "v_proj"}
    assert any(
        p.grad is not None and p.grad.abs().sum() > 0
        for n, p in model.named_parameters()
        if "lora_B" in n
    )
