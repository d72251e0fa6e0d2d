"""R18: what a run will take before it is launched: optimizer steps, tokens, minutes (boot +
training + export) and cost. The figures and their sources are in docs/estimate.md."""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from statistics import median

# The trainer's batch shapes (trainer/protocol/manifest.py `default_hyperparameters`) all make
# 16 examples per optimizer step (8×2, 4×4, 2×8, 1×16).
EXAMPLES_PER_STEP = 16
# A JSONL chat row is English text wrapped in JSON: about 4 bytes per token of the tokenizers
# the catalogue's models use; counted on the raw row, so the JSON keys make this err long.
BYTES_PER_TOKEN = 4
# Before the first step (docs/runpod.md, "The boot deadline"): a cold pull of the image
# (169 s), the trainer's environment (96 s), the base model's download and load (120 s).
BOOT_SECONDS = 169 + 96 + 120
# After the last step: save, upload and verify the adapter (tens of MB).
EXPORT_SECONDS = 60
# Tokens per second of LoRA training of a 7–8B model on one GPU, when this organization has no
# measured figure yet (docs/estimate.md); a GPU not listed uses DEFAULT_TOKENS_PER_S.
TOKENS_PER_S = {
    "NVIDIA GeForce RTX 4090": 2500.0,
    "NVIDIA RTX A6000": 1800.0,
    "NVIDIA A40": 1800.0,
    "NVIDIA L40S": 2800.0,
    "NVIDIA A100 80GB PCIe": 3500.0,
    "NVIDIA A100-SXM4-80GB": 3800.0,
    "NVIDIA H100 PCIe": 5000.0,
    "NVIDIA H100 80GB HBM3": 6000.0,
}
DEFAULT_TOKENS_PER_S = 1500.0


# A forward pass alone (evaluation) is about a third of a training step's forward and backward:
# evaluation's tokens/s where no run measured it (docs/estimate.md).
EVAL_SPEEDUP = 3.0


@dataclass(frozen=True)
class Throughput:
    tokens_per_s: float
    source: str  # "baseline" (the full run's trial), "earlier_run" or "table"
    run_id: str | None = None
    eval_tokens_per_s: float | None = None  # measured by that run's evaluations, when it had any


def table_throughput(gpu_type_id: str) -> Throughput:
    return Throughput(TOKENS_PER_S.get(gpu_type_id, DEFAULT_TOKENS_PER_S), "table")


def measured(points: list[float | None]) -> float | None:
    """A run's measured tokens/s: the median of its progress points (the first steps warm up)."""
    values = [p for p in points if p is not None and p > 0 and math.isfinite(p)]
    return median(values) if values else None


def held_out(rows: int, validation_fraction: float) -> int:
    """The rows the trainer holds out for evaluation (trainer/run.py `split_validation`)."""
    if validation_fraction <= 0 or rows < 2:
        return 0
    return min(rows - 1, max(1, round(rows * validation_fraction)))


def evaluations(steps: int) -> int:
    """How often the trainer evaluates: on every twentieth of its steps, the first and the last
    (trainer/run.py `_on_progress`)."""
    every = max(1, steps // 20)
    return len({1, steps} | set(range(every, steps + 1, every)))


def estimate(
    *,
    rows: int | None,
    size_bytes: int,
    epochs: int,
    max_seq_len: int,
    validation_fraction: float,
    gpu_count: int,
    throughput: Throughput,
    price_per_hour: Decimal,
    tokens_per_row: tuple[float, str] | None = None,
) -> dict[str, object]:
    """The estimate shown on a draft: each row's tokens are `tokens_per_row` (counted with the
    base model's tokenizer, or measured by the trial) or else its bytes over BYTES_PER_TOKEN,
    cut at `max_seq_len` as the trainer cuts them; the validation split is not trained on, and
    is evaluated as often as the trainer does (R17)."""
    rows = rows if rows and rows > 0 else max(1, math.ceil(size_bytes / BYTES_PER_TOKEN / 512))
    per_row: float = max(1, math.ceil(size_bytes / rows / BYTES_PER_TOKEN))
    tokens_source = "bytes"
    if tokens_per_row is not None and tokens_per_row[0] > 0:
        per_row, tokens_source = tokens_per_row
    per_row = min(per_row, max_seq_len)
    held = held_out(rows, validation_fraction)
    train_rows = max(1, rows - held)
    tokens = round(train_rows * per_row * epochs)
    steps = math.ceil(epochs * train_rows / EXAMPLES_PER_STEP)
    speed = throughput.tokens_per_s * max(1, gpu_count)
    eval_speed = (throughput.eval_tokens_per_s or throughput.tokens_per_s * EVAL_SPEEDUP) * max(
        1, gpu_count
    )
    eval_s = evaluations(steps) * held * per_row / eval_speed if held else 0.0
    training_s = tokens / speed + eval_s
    minutes = math.ceil((BOOT_SECONDS + training_s + EXPORT_SECONDS) / 60)
    cost = (price_per_hour * minutes / 60).quantize(Decimal("0.01"), rounding=ROUND_CEILING)
    return {
        "steps": steps,
        "tokens": tokens,
        "tokens_source": tokens_source,
        "training_seconds": round(training_s, 1),
        "minutes": minutes,
        "cost": str(cost),
        "price_per_hour": str(price_per_hour),
        "tokens_per_s": round(throughput.tokens_per_s, 1),
        "throughput_source": throughput.source,
        "throughput_run_id": throughput.run_id,
    }
