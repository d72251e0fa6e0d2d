"""R18: the estimate's arithmetic (domain/estimate.py)."""

from __future__ import annotations

from decimal import Decimal

from domain.estimate import (
    BOOT_SECONDS,
    EXPORT_SECONDS,
    Throughput,
    estimate,
    evaluations,
    held_out,
    measured,
    table_throughput,
)


def _estimate(**changes: object) -> dict[str, object]:
    args: dict[str, object] = {
        "rows": 1000,
        "size_bytes": 400_000,  # 400 bytes a row: 100 tokens
        "epochs": 3,
        "max_seq_len": 2048,
        "validation_fraction": 0.1,
        "gpu_count": 1,
        "throughput": Throughput(1000.0, "table"),
        "price_per_hour": Decimal("1.20"),
    }
    args.update(changes)
    return estimate(**args)  # type: ignore[arg-type]


def test_tokens_steps_minutes_and_cost() -> None:
    e = _estimate()
    # 900 training rows (10% held out) × 100 tokens × 3 epochs; 16 examples a step
    assert e["tokens"] == 270_000
    assert e["steps"] == 169  # ceil(2700 / 16)
    # R17: the 100 held-out rows (10,000 tokens) are evaluated on every 8th step, the first
    # and the last (23 times), forward only: three times the training tokens/s
    assert evaluations(169) == 23
    assert e["training_seconds"] == round(270 + 23 * 10_000 / 3000, 1) == 346.7
    # training and evaluation + boot + export, rounded up to the minute
    assert e["minutes"] == -(-(BOOT_SECONDS + 346.7 + EXPORT_SECONDS) // 60) == 14
    assert e["cost"] == "0.28"  # 14 minutes at $1.20/hour
    assert e["throughput_source"] == "table" and e["tokens_source"] == "bytes"


def test_a_measured_evaluation_speed_and_tokens_per_row_are_used_when_known() -> None:
    """R18: a full run estimated from its trial: the trial's tokens per row (as its tokenizer
    made them) and its evaluation's own tokens/s."""
    e = _estimate(
        throughput=Throughput(1000.0, "baseline", "trial", eval_tokens_per_s=5000.0),
        tokens_per_row=(50.0, "baseline"),
    )
    assert e["tokens"] == 900 * 50 * 3 and e["tokens_source"] == "baseline"
    assert e["training_seconds"] == round(135 + 23 * 100 * 50 / 5000, 1)
    none = _estimate(validation_fraction=0.0)
    assert none["training_seconds"] == 300.0  # 1000 rows trained, nothing evaluated
    assert held_out(40, 0.1) == 4 and held_out(5, 0.01) == 1 and held_out(1, 0.5) == 0


def test_rows_are_cut_at_max_seq_len_and_gpus_share_the_work() -> None:
    long = _estimate(size_bytes=40_000_000, max_seq_len=512)  # 10,000 tokens a row, cut to 512
    assert long["tokens"] == 900 * 512 * 3
    two = _estimate(size_bytes=40_000_000, max_seq_len=512, gpu_count=2)
    assert two["tokens"] == long["tokens"] and two["minutes"] < long["minutes"]  # type: ignore[operator]


def test_cost_rounds_up_to_the_cent() -> None:
    e = _estimate(price_per_hour=Decimal("0.69"))  # 14 minutes: $0.161
    assert e["cost"] == "0.17"


def test_measured_is_the_median_of_the_points_that_have_one() -> None:
    assert measured([None, 100.0, 900.0, 1000.0, 0.0, float("nan")]) == 900.0
    assert measured([None]) is None


def test_an_unlisted_gpu_uses_the_default_figure() -> None:
    assert table_throughput("NVIDIA A100 80GB PCIe").tokens_per_s == 3500.0
    assert table_throughput("Some new GPU").tokens_per_s == 1500.0
