"""The memory model (R2, T1): its table in docs/memory.md is generated from it (so it cannot go
stale), its figures are what the issue's arithmetic says for the catalogue, and its per-token
coefficients cover what the tiny models actually keep for backward on the CPU.

Regenerate the document: `uv run python -m tests.unit.domain.test_memory --write`."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from domain.base_models import CATALOGUE
from domain.gpus import BASE_MODELS, memory_shortfall
from domain.memory import (
    CATALOGUE_VOCAB,
    CONTEXT_BYTES,
    DEFAULT_LORA_R,
    DEFAULT_SEQ_LEN,
    GIB,
    LOGIT_BYTES,
    LORA_STATE_BYTES,
    SLACK_FRACTION,
    WEIGHT_BYTES,
    ModelShape,
    catalogue_shape,
    memory_need,
    micro_batch_tokens,
)

DOC = Path(__file__).resolve().parents[3] / "docs" / "memory.md"
CARDS = (24, 40, 48, 80)


def _shape(model_id: str) -> ModelShape:
    shape = catalogue_shape(model_id)
    assert shape is not None
    return shape


def render() -> str:
    """docs/memory.md, from the memory model."""
    lines = [
        "# Memory: what fits where",
        "",
        "Generated from the memory model (`domain/memory.py`) by",
        "`uv run python -m tests.unit.domain.test_memory --write`; the suite fails when stale.",
        "One model decides which GPUs a base model may train on (`GET /v1/gpus?base_model=`, and",
        "every draft) and how many tokens the trainer puts through the model at once on the GPU a",
        "run rents (the manifest's `micro_batch_tokens`). Rows longer than that budget go alone;",
        "an out of memory mid-run resumes from the last checkpoint with half the budget, once.",
        "",
        "## The arithmetic",
        "",
        f"For a micro-batch of T tokens with LoRA rank r (defaults: T = {DEFAULT_SEQ_LEN:,}, one",
        f"row of the default `max_seq_len`; r = {DEFAULT_LORA_R}, all seven projections):",
        "",
        f"- weights: {WEIGHT_BYTES} bytes a parameter (bf16);",
        f"- LoRA state: {LORA_STATE_BYTES} bytes a LoRA parameter (fp32 weight, gradient and",
        "  Adam's two moments); a LoRA parameter count is r × (in + out) per projection per layer;",
        "- activations with gradient checkpointing, per token: 2 × hidden × layers (each layer's",
        "  input, kept) + 2 × (18 × hidden + 6 × intermediate) (one layer recomputed in backward,",
        "  SDPA attention) + 3 × (6 × hidden + intermediate) (LoRA dropout copies and masks);",
        f"- the loss's logits: {LOGIT_BYTES} bytes a vocabulary entry a token (bf16 logits, their",
        "  fp32 upcast, the saved log-softmax and its gradient); the trainer drops each",
        "  forward's output before the next, so one micro-batch's logits are alive at a time;",
        f"- slack: {CONTEXT_BYTES // GIB} GiB of CUDA context and allocator reserve, plus"
        f" {SLACK_FRACTION:.0%} of what the micro-batch allocates.",
        "",
        "A card's nominal GB are GiB (an RTX 3090's 24 GB are 24,576 MiB), and so are the",
        "figures here. One GPU per run: more than one is not used by the trainer.",
        "",
        f"## Each catalogue model at {DEFAULT_SEQ_LEN:,} tokens (GB)",
        "",
        "| base model | weights | LoRA state | activations | logits | slack | total |",
        "|---|---|---|---|---|---|---|",
    ]
    for model_id in CATALOGUE_VOCAB:
        n = memory_need(_shape(model_id))
        parts = (n.weights, n.lora_state, n.activations, n.logits, n.slack, n.total)
        lines.append(f"| {model_id} | " + " | ".join(f"{x / GIB:.1f}" for x in parts) + " |")
    lines += [
        "",
        "## What fits where",
        "",
        "Each cell: the tokens one forward pass may hold on that card (the trainer's budget), or",
        f"what the model needs when not even one row of {DEFAULT_SEQ_LEN:,} tokens fits.",
        "",
        "| base model | parameters | " + " | ".join(f"{gb} GB" for gb in CARDS) + " |",
        "|---|---|" + "---|" * len(CARDS),
    ]
    for model_id in CATALOGUE_VOCAB:
        shape = _shape(model_id)
        cells = []
        for gb in CARDS:
            tokens = micro_batch_tokens(shape, gb)
            if tokens >= DEFAULT_SEQ_LEN:
                cells.append(f"fits: {tokens:,} tokens")
            else:
                cells.append(f"no: needs {memory_need(shape).total_gib:.1f} GB")
        billions = CATALOGUE[model_id].parameters_b
        lines.append(f"| {model_id} | {billions:g} B | " + " | ".join(cells) + " |")
    lines += [
        "",
        "Four rows of 2,048 tokens in one forward pass (the old row-count micro-batch) would need",
        f"{memory_need(_shape('Qwen/Qwen2.5-7B-Instruct'), 4 * DEFAULT_SEQ_LEN).total_gib:.1f} GB"
        " for Qwen2.5-7B: the token budget is what lets 7-8B models train on 24 GB cards.",
        "",
        "## How it is checked",
        "",
        "- `tests/unit/domain/test_memory.py`: this page is the model's; the per-token",
        "  coefficients cover what the tiny models keep for backward on the CPU (measured with",
        "  autograd's saved-tensor hooks, with and without checkpointing), and the weights and",
        "  LoRA counts equal the loaded model's.",
        "- `tests/trainer/test_memory.py`: micro-batches by the token budget, and an out of",
        "  memory (torch's `OutOfMemoryError` on a fake device) resumed with half the budget.",
        "- `tests/trainer/test_gpu_memory.py` (marked `gpu`, for the accelerator machine): the",
        "  measured CUDA peak of a forward and backward stays within the model's figure.",
        "",
    ]
    return "\n".join(lines)


def test_docs_memory_md_is_the_memory_models_table() -> None:
    assert DOC.read_text() == render(), (
        "run: uv run python -m tests.unit.domain.test_memory --write"
    )


def test_the_defaults_train_7_to_8b_models_on_a_24_gb_card_and_not_on_16() -> None:
    for model_id in ("Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"):
        shape = _shape(model_id)
        assert memory_need(shape).total_gib <= 24 < memory_need(shape, 4 * 2048).total_gib
        assert micro_batch_tokens(shape, 24) >= DEFAULT_SEQ_LEN
        assert memory_shortfall(model_id, 24) is None
        reason = memory_shortfall(model_id, 16)
        assert reason is not None and f"{memory_need(shape).total_gib:.1f} GB" in reason
    # The arithmetic (TRAINER_FACTS section 6): 1.8 MB of logits a token for Llama-3.1-8B
    # (2.1 for Qwen2.5-7B), 15-16 GB of weights, ~0.65 GB of LoRA state.
    llama = memory_need(_shape("meta-llama/Llama-3.1-8B-Instruct"), 1)
    assert 1.7e6 < llama.logits < 1.9e6 and 0.55e6 < llama.activations < 0.8e6
    assert 15.5e9 < llama.weights < 16.5e9 and 0.6e9 < llama.lora_state < 0.75e9
    assert BASE_MODELS["meta-llama/Llama-3.3-70B-Instruct"] > 80  # no single card holds 70B


def _tiny(tmp_path: Path, architecture: str, hidden: int, inter: int) -> Path:
    from trainer.tiny import build_tiny_model, demo_rows, rows_text

    return build_tiny_model(
        tmp_path / architecture,
        rows_text(demo_rows(24)),
        architecture=architecture,
        hidden_size=hidden,
        intermediate_size=inter,
        num_layers=3,
    )


def _saved_bytes_per_token(folder: Path, *, checkpointing: bool, tokens: int = 256) -> float:
    """Bytes autograd keeps for backward (not the weights), per token, in bf16 on the CPU."""
    import torch
    from transformers import AutoModelForCausalLM

    from trainer.model import add_lora
    from trainer.protocol import Hyperparameters

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    model.config.use_cache = False
    peft_model = add_lora(model, Hyperparameters(lora_r=16), checkpointing=checkpointing)
    peft_model.train()
    weights = {p.untyped_storage().data_ptr() for p in peft_model.parameters()}
    saved: dict[int, int] = {}

    def pack(t: Any) -> Any:
        storage = t.untyped_storage()
        if storage.data_ptr() not in weights:
            saved.setdefault(storage.data_ptr(), storage.nbytes())
        return t

    torch.manual_seed(0)
    ids = torch.randint(3, model.config.vocab_size, (2, tokens // 2))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        peft_model(input_ids=ids, labels=ids).loss.backward()
    return sum(saved.values()) / tokens


@pytest.mark.parametrize(
    ("architecture", "hidden", "inter"), [("llama", 128, 512), ("qwen2", 192, 448)]
)
def test_the_per_token_figure_covers_what_a_tiny_model_keeps_for_backward(
    tmp_path: Path, architecture: str, hidden: int, inter: int
) -> None:
    """Measured peak a token: what checkpointing keeps for the whole forward, plus one layer's
    recomputed activations (what a layer keeps without checkpointing). The model must cover it
    without overstating it more than half again."""
    folder = _tiny(tmp_path, architecture, hidden, inter)
    config = json.loads((folder / "config.json").read_text())
    layers = int(config["num_hidden_layers"])
    kept = _saved_bytes_per_token(folder, checkpointing=True)
    everything = _saved_bytes_per_token(folder, checkpointing=False)
    measured = kept + (everything - kept) / layers
    shape = ModelShape.from_config(config, 1)
    modelled = shape.activation_bytes_per_token() + shape.logit_bytes_per_token()
    assert measured <= modelled <= 1.5 * measured, (measured, modelled, kept, everything)


def test_weights_and_lora_state_are_the_loaded_models(tmp_path: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    from trainer.model import add_lora
    from trainer.protocol import Hyperparameters

    folder = _tiny(tmp_path, "llama", 128, 512)
    config = json.loads((folder / "config.json").read_text())
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16)
    parameters = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    lora = add_lora(model, Hyperparameters(lora_r=16), checkpointing=False)
    trainable = sum(p.numel() for p in lora.parameters() if p.requires_grad)
    need = memory_need(ModelShape.from_config(config, parameters), 0)
    assert need.weights == weight_bytes
    assert need.lora_state == LORA_STATE_BYTES * trainable


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python -m tests.unit.domain.test_memory --write")
    DOC.write_text(render())
