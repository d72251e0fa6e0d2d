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


@dataclass(frozen=True)
class Throughput:
    tokens_per_s: float
    source: str  # "baseline" (the full run's trial), "earlier_run" or "table"
    run_id: str | None = None


def table_throughput(gpu_type_id: str) -> Throughput:
    return Throughput(TOKENS_PER_S.get(gpu_type_id, DEFAULT_TOKENS_PER_S), "table")


def measured(points: list[float | None]) -> float | None:
    """A run's measured tokens/s: the median of its progress points (the first steps warm up)."""
    values = [p for p in points if p is not None and p > 0 and math.isfinite(p)]
    return median(values) if values else None


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
) -> dict[str, object]:
    """The estimate shown on a draft: each row's tokens are its bytes over BYTES_PER_TOKEN, cut
    at `max_seq_len` as the trainer cuts them; the validation split is not trained on."""
    rows = rows if rows and rows > 0 else max(1, math.ceil(size_bytes / BYTES_PER_TOKEN / 512))
    per_row = min(max(1, math.ceil(size_bytes / rows / BYTES_PER_TOKEN)), max_seq_len)
    train_rows = max(1, rows - round(rows * validation_fraction))
    tokens = train_rows * per_row * epochs
    steps = math.ceil(epochs * train_rows / EXAMPLES_PER_STEP)
    training_s = tokens / (throughput.tokens_per_s * max(1, gpu_count))
    minutes = math.ceil((BOOT_SECONDS + training_s + EXPORT_SECONDS) / 60)
    cost = (price_per_hour * minutes / 60).quantize(Decimal("0.01"), rounding=ROUND_CEILING)
    return {
        "steps": steps,
        "tokens": tokens,
        "minutes": minutes,
        "cost": str(cost),
        "price_per_hour": str(price_per_hour),
        "tokens_per_s": round(throughput.tokens_per_s, 1),
        "throughput_source": throughput.source,
        "throughput_run_id": throughput.run_id,
    }
