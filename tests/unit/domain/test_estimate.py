"""R18: the estimate's arithmetic (domain/estimate.py)."""

from __future__ import annotations

from decimal import Decimal

from domain.estimate import (
    BOOT_SECONDS,
    EXPORT_SECONDS,
    Throughput,
    estimate,
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
    # 270 s of training + boot + export, rounded up to the minute
    assert e["minutes"] == -(-(BOOT_SECONDS + 270 + EXPORT_SECONDS) // 60) == 12
    assert e["cost"] == "0.24"  # 12 minutes at $1.20/hour
    assert e["throughput_source"] == "table"


def test_rows_are_cut_at_max_seq_len_and_gpus_share_the_work() -> None:
    long = _estimate(size_bytes=40_000_000, max_seq_len=512)  # 10,000 tokens a row, cut to 512
    assert long["tokens"] == 900 * 512 * 3
    two = _estimate(size_bytes=40_000_000, max_seq_len=512, gpu_count=2)
    assert two["tokens"] == long["tokens"] and two["minutes"] < long["minutes"]  # type: ignore[operator]


def test_cost_rounds_up_to_the_cent() -> None:
    e = _estimate(price_per_hour=Decimal("0.69"))  # 12 minutes: $0.138
    assert e["cost"] == "0.14"


def test_measured_is_the_median_of_the_points_that_have_one() -> None:
    assert measured([None, 100.0, 900.0, 1000.0, 0.0, float("nan")]) == 900.0
    assert measured([None]) is None


def test_an_unlisted_gpu_uses_the_default_figure() -> None:
    assert table_throughput("NVIDIA A100 80GB PCIe").tokens_per_s == 3500.0
    assert table_throughput("Some new GPU").tokens_per_s == 1500.0
