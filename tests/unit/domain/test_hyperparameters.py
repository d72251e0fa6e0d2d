"""R16: the domain's own check of the hyperparameters (for callers other than the API)."""

from __future__ import annotations

import pytest

from domain.hyperparameters import HYPERPARAMETERS, InvalidHyperparameter, checked_hyperparameters


def test_values_within_bounds_come_back_as_their_kinds() -> None:
    checked = checked_hyperparameters({"epochs": 3.0, "learning_rate": 0.001, "lora_alpha": 16})
    assert checked == {"epochs": 3, "learning_rate": 0.001, "lora_alpha": 16.0}
    assert isinstance(checked["epochs"], int) and isinstance(checked["lora_alpha"], float)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("epochs", 0),
        ("epochs", 2.5),
        ("learning_rate", 0.5),
        ("lora_rank", 257),
        ("lora_dropout", float("nan")),
        ("seed", True),
        ("max_seq_len", "2048"),
        ("warmup", 0.1),
    ],
)
def test_a_value_out_of_bounds_names_its_field(name: str, value: object) -> None:
    with pytest.raises(InvalidHyperparameter) as caught:
        checked_hyperparameters({"epochs": 1, name: value})
    assert caught.value.extra["rule"] == name
    assert caught.value.detail.startswith(name)


def test_every_bound_admits_its_own_ends() -> None:
    for name, bound in HYPERPARAMETERS.items():
        assert checked_hyperparameters({name: bound.kind(bound.low)})[name] == bound.low
        assert checked_hyperparameters({name: bound.kind(bound.high)})[name] == bound.high
