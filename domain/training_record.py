"""What a verified adapter says of its own training (R17, R18, R19): the figures the trainer wrote
in its `tensorant.json`, kept on `AdapterVerified` so a run shows its train and eval loss, the
best step kept, its measured throughput and training time, and a Hub model's commit.

The file comes from the Pod, which the organization controls: only these names are kept, each
only when it is a finite number in bounds (or a commit sha), so nothing else reaches the log."""

from __future__ import annotations

import math
import re
from typing import Any

MAX_COUNT = 10**15
MAX_FIGURE = 1e12
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
# the name in tensorant.json -> the name on the run (`training`)
_COUNTS = {
    "step": "steps",
    "best_step": "best_step",
    "tokens": "tokens",
    "examples": "examples",
    "held_out": "held_out",
    "dataset_tokens": "dataset_tokens",
    "rows": "rows",
}
_FIGURES = {
    "last_loss": "train_loss",
    "eval_loss": "eval_loss",
    "best_eval_loss": "best_eval_loss",
    "training_seconds": "training_seconds",
    "eval_seconds": "eval_seconds",
    "tokens_per_s": "tokens_per_s",
    "eval_tokens_per_s": "eval_tokens_per_s",
}


def training_record(metrics: dict[str, Any] | None) -> dict[str, Any] | None:
    """The kept figures of an adapter's `tensorant.json`, or None when it has none of them."""
    if not isinstance(metrics, dict):
        return None
    out: dict[str, Any] = {}
    for name, shown in _COUNTS.items():
        value = metrics.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
            out[shown] = value
    for name, shown in _FIGURES.items():
        value = metrics.get(name)
        if (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and 0 <= value <= MAX_FIGURE
        ):
            out[shown] = float(value)
    revision = metrics.get("base_model_revision")
    if isinstance(revision, str) and _COMMIT.match(revision):
        out["base_model_revision"] = revision
    return out or None
