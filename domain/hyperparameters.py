"""R16: the hyperparameters a member may choose for a run, with their bounds.

A run's configuration keeps every value the run trains with (`RunConfig.hyperparameters`) and
which of them were not chosen but defaulted from the base model's architecture
(`RunConfig.defaults`). The API's schema takes the same bounds (one table, here), so a value out
of bounds is refused before the domain sees it, naming the field; the domain checks them again
for any other caller.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from domain.errors import DomainError


@dataclass(frozen=True)
class Bound:
    kind: type  # int or float
    low: float
    high: float
    description: str


# Name (as the API spells it) -> bound. The order is the order they are shown in.
HYPERPARAMETERS: dict[str, Bound] = {
    "epochs": Bound(int, 1, 100, "Passes over the dataset (a trial stops at its step cap)."),
    "learning_rate": Bound(float, 1e-7, 1e-2, "Peak learning rate of the LoRA weights."),
    "lora_rank": Bound(int, 1, 256, "LoRA rank r."),
    "lora_alpha": Bound(float, 1, 1024, "LoRA alpha (the update is scaled by alpha / r)."),
    "lora_dropout": Bound(float, 0, 0.5, "Dropout on the LoRA input."),
    "max_seq_len": Bound(int, 64, 32768, "Tokens of a row kept (longer rows are cut)."),
    "warmup_ratio": Bound(float, 0, 0.5, "Fraction of the steps the learning rate warms up."),
    "validation_fraction": Bound(
        float, 0, 0.5, "Fraction of the rows held out to measure eval_loss (0: none)."
    ),
    "seed": Bound(int, 0, 2**31 - 1, "Seed of the shuffle, the split and the LoRA init."),
}


class InvalidHyperparameter(DomainError):
    problem = "invalid-run-config"
    title = "The run configuration breaks a rule"


def checked_hyperparameters(values: Mapping[str, Any]) -> dict[str, Any]:
    """`values` within their bounds, as their kinds (an int for an integer field); the first
    that is not names itself (`rule`: the field's name)."""
    out: dict[str, Any] = {}
    for name, given in values.items():
        bound = HYPERPARAMETERS.get(name)
        if bound is None:
            raise InvalidHyperparameter(f"{name} is not a hyperparameter", rule=name)
        number = isinstance(given, int | float) and not isinstance(given, bool)
        whole = number and math.isfinite(given) and float(given).is_integer()
        value = int(given) if bound.kind is int and whole else given
        ok = number and math.isfinite(value) and bound.low <= value <= bound.high
        if not ok or (bound.kind is int and not isinstance(value, int)):
            kind = "an integer" if bound.kind is int else "a number"
            raise InvalidHyperparameter(
                f"{name} must be {kind} from {bound.low:g} to {bound.high:g}", rule=name
            )
        out[name] = bound.kind(value)
    return out
