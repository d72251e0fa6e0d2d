"""The memory model (R2, T1): what a LoRA fine-tune of a base model needs on one GPU, by part.

One model decides both which GPUs a base model may train on (at a sequence length) and how many
tokens the trainer puts in one micro-batch on the GPU it got (the manifest's
`micro_batch_tokens`). Its parts, for a micro-batch of T tokens (docs/memory.md has the table):

- weights: 2 bytes a parameter (bf16);
- LoRA state: 16 bytes a LoRA parameter (fp32 weight, gradient, Adam's two moments);
- activations with gradient checkpointing: each layer's input kept (2·hidden bytes a token a
  layer) plus one layer recomputed during backward: its attention and MLP intermediates,
  2·(18·hidden + 6·intermediate) bytes a token (SDPA, so nothing quadratic), and LoRA's dropout
  copies of the projections' inputs with their masks, 3·(6·hidden + intermediate);
- the loss's logits: 14 bytes a vocabulary entry a token (bf16 logits, the fp32 upcast
  transformers' loss makes, the saved log-softmax and its gradient); the trainer frees each
  micro-batch's output before the next forward, so only one micro-batch's logits are alive;
- the CUDA context and allocator slack: 1 GiB, plus 5% of what the micro-batch allocates.

A card's `memory_gb` is its nominal size, which NVIDIA counts in GiB (an RTX 3090 has 24,576 MiB);
so are the figures here. The arithmetic is a model, checked against measured peaks of the tiny
models on the CPU (tests/unit/domain/test_memory.py) and on a GPU where one is lent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from domain.lora import CATALOGUE_ARCHITECTURES, Architecture

GIB = 1024**3
WEIGHT_BYTES = 2  # bf16
LORA_STATE_BYTES = 16  # fp32 weight + gradient + Adam m and v
LOGIT_BYTES = 14  # bf16 logits, fp32 upcast, saved log-softmax, its gradient
CONTEXT_BYTES = GIB  # CUDA context and the allocator's fixed slack
SLACK_FRACTION = 0.05  # fragmentation over what one micro-batch allocates
DEFAULT_SEQ_LEN = 2048
DEFAULT_LORA_R = 16

# From each model's config.json on the Hub (vocab_size); parameters as on the model card.
CATALOGUE_VOCAB: dict[str, int] = {
    "Qwen/Qwen2.5-0.5B-Instruct": 151_936,
    "Qwen/Qwen2.5-7B-Instruct": 152_064,
    "meta-llama/Llama-3.2-3B-Instruct": 128_256,
    "meta-llama/Llama-3.1-8B-Instruct": 128_256,
    "mistralai/Mistral-7B-Instruct-v0.3": 32_768,
    "google/gemma-2-27b-it": 256_000,
    "meta-llama/Llama-3.3-70B-Instruct": 128_256,
}
CATALOGUE_PARAMETERS: dict[str, int] = {
    "Qwen/Qwen2.5-0.5B-Instruct": 494_032_768,
    "Qwen/Qwen2.5-7B-Instruct": 7_615_616_512,
    "meta-llama/Llama-3.2-3B-Instruct": 3_212_749_824,
    "meta-llama/Llama-3.1-8B-Instruct": 8_030_261_248,
    "mistralai/Mistral-7B-Instruct-v0.3": 7_248_023_552,
    "google/gemma-2-27b-it": 27_227_128_320,
    "meta-llama/Llama-3.3-70B-Instruct": 70_553_706_496,
}


@dataclass(frozen=True)
class ModelShape:
    """What the memory model needs to know of a base model."""

    parameters: int
    architecture: Architecture
    vocab_size: int

    @classmethod
    def from_config(cls, config: Mapping[str, Any], parameters: int) -> ModelShape:
        return cls(
            parameters, Architecture.from_config(config), int(config.get("vocab_size") or 32000)
        )

    def activation_bytes_per_token(self) -> int:
        a = self.architecture
        kept = 2 * a.hidden_size * a.num_layers
        recomputed = 2 * (18 * a.hidden_size + 6 * a.intermediate_size)
        lora_dropout = 3 * (6 * a.hidden_size + a.intermediate_size)
        return kept + recomputed + lora_dropout

    def logit_bytes_per_token(self) -> int:
        return LOGIT_BYTES * self.vocab_size


def catalogue_shape(base_model: str) -> ModelShape | None:
    arch = CATALOGUE_ARCHITECTURES.get(base_model)
    if arch is None or base_model not in CATALOGUE_VOCAB:
        return None
    return ModelShape(CATALOGUE_PARAMETERS[base_model], arch, CATALOGUE_VOCAB[base_model])


@dataclass(frozen=True)
class MemoryNeed:
    """Bytes by part for one micro-batch of `tokens` tokens."""

    tokens: int
    weights: int
    lora_state: int
    activations: int
    logits: int
    slack: int

    @property
    def total(self) -> int:
        return self.weights + self.lora_state + self.activations + self.logits + self.slack

    @property
    def total_gib(self) -> float:
        return self.total / GIB

    def explain(self) -> str:
        """The arithmetic in words, for a refusal's reason and the docs."""

        def g(n: int) -> str:
            return f"{n / GIB:.1f}"

        return (
            f"{g(self.total)} GB at {self.tokens:,} tokens a micro-batch: weights {g(self.weights)}"
            f" + LoRA state {g(self.lora_state)} + activations {g(self.activations)} + logits "
            f"{g(self.logits)} + CUDA context and slack {g(self.slack)}"
        )


def memory_need(
    shape: ModelShape, tokens: int = DEFAULT_SEQ_LEN, lora_r: int = DEFAULT_LORA_R
) -> MemoryNeed:
    """What one GPU needs to train `shape` with LoRA rank `lora_r` on `tokens` tokens a
    micro-batch (a micro-batch holds at least one whole row: tokens >= the sequence length)."""
    activations = shape.activation_bytes_per_token() * tokens
    logits = shape.logit_bytes_per_token() * tokens
    return MemoryNeed(
        tokens=tokens,
        weights=WEIGHT_BYTES * shape.parameters,
        lora_state=LORA_STATE_BYTES * shape.architecture.lora_parameters(lora_r),
        activations=activations,
        logits=logits,
        slack=CONTEXT_BYTES + math.ceil(SLACK_FRACTION * (activations + logits)),
    )


def micro_batch_tokens(shape: ModelShape, memory_gb: float, lora_r: int = DEFAULT_LORA_R) -> int:
    """The most tokens one micro-batch may hold on a card of `memory_gb` (0 when not even the
    weights fit)."""
    fixed = memory_need(shape, 0, lora_r).total
    per_token = (shape.activation_bytes_per_token() + shape.logit_bytes_per_token()) * (
        1 + SLACK_FRACTION
    )
    room = memory_gb * GIB - fixed
    return max(0, int(room // per_token))


def need_gb(shape: ModelShape, seq_len: int = DEFAULT_SEQ_LEN, lora_r: int = DEFAULT_LORA_R) -> int:
    """Whole GB a card needs to train one row of `seq_len` tokens (rounded up)."""
    return math.ceil(memory_need(shape, seq_len, lora_r).total_gib)
