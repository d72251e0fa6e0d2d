"""The memory model against a real GPU (R2, T1), for the accelerator machine: `pytest -m gpu`
with CUDA (deselected elsewhere, see tests/conftest.py). A mid-size decoder of random weights in
bf16 with LoRA and gradient checkpointing, one forward and backward of the token budget the
memory model gives this card: the measured CUDA peak stays within the model's figure, and the
figure does not overstate it by more than half again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from domain.memory import GIB, ModelShape, memory_need, micro_batch_tokens

pytestmark = pytest.mark.gpu


def test_the_measured_cuda_peak_stays_within_the_memory_models_figure(tmp_path: Path) -> None:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from trainer.model import add_lora
    from trainer.protocol import Hyperparameters

    assert torch.cuda.is_available(), "the gpu tests need CUDA"
    config = Qwen2Config(
        vocab_size=151_936,
        hidden_size=1536,
        intermediate_size=8960,
        num_hidden_layers=8,
        num_attention_heads=12,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16).cuda()
    model.config.use_cache = False
    (tmp_path / "config.json").write_text(config.to_json_string())
    parameters = sum(p.numel() for p in model.parameters())
    shape = ModelShape.from_config(json.loads((tmp_path / "config.json").read_text()), parameters)
    peft_model = add_lora(model, Hyperparameters(lora_r=16), checkpointing=True)
    peft_model.train()
    optimizer = torch.optim.AdamW([p for p in peft_model.parameters() if p.requires_grad])
    total_gib = torch.cuda.get_device_properties(0).total_memory / GIB
    card = min(int(total_gib), 24)  # plan for a 24 GB card even on a larger one
    tokens = min(micro_batch_tokens(shape, card), 8192)
    ids = torch.randint(0, config.vocab_size, (1, tokens), device="cuda")
    torch.cuda.reset_peak_memory_stats()
    peft_model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    peak = torch.cuda.max_memory_allocated()
    modelled = memory_need(shape, tokens).total - memory_need(shape, 0).slack  # no CUDA context
    assert peak <= modelled <= 1.5 * peak, (peak / GIB, modelled / GIB, tokens)
