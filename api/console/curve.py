"""R17 on the run page: the training curve of a run's metric points, drawn as an SVG polyline
the server computes (the console runs no inline script)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from api.schemas.runs import MetricPoint

WIDTH, HEIGHT = 300, 100
MAX_DRAWN = 300  # vertices of a polyline: more than the picture's width shows nothing more


def _thinned(series: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """At most `MAX_DRAWN` of the series' points, evenly spaced, its first and last kept."""
    if len(series) <= MAX_DRAWN:
        return series
    stride = (len(series) - 1) / (MAX_DRAWN - 1)
    return [series[round(i * stride)] for i in range(MAX_DRAWN)]


def curve(points: Sequence[MetricPoint]) -> dict[str, Any] | None:
    """`train` (and `eval`, with a validation split) as SVG polyline points over one step and
    loss scale, and what the caption says; None below two points with a loss."""
    train = [(p.step, p.loss) for p in points if p.loss is not None]
    if len(train) < 2:
        return None
    evals = [(p.step, p.eval_loss) for p in points if p.eval_loss is not None]
    steps = [s for s, _ in train + evals]
    losses = [v for _, v in train + evals]
    first_step, last_step = min(steps), max(steps)
    low, high = min(losses), max(losses)

    def line(series: list[tuple[int, float]]) -> str:
        def x(step: int) -> float:
            return (step - first_step) / max(last_step - first_step, 1) * WIDTH

        def y(loss: float) -> float:
            return HEIGHT - (loss - low) / max(high - low, 1e-12) * HEIGHT

        return " ".join(f"{x(s):.1f},{y(v):.1f}" for s, v in _thinned(series))

    return {
        "width": WIDTH,
        "height": HEIGHT,
        "train": line(train),
        "eval": line(evals) if len(evals) >= 2 else None,
        "points": len(train),
        "first": train[0][1],
        "last": train[-1][1],
        "eval_last": evals[-1][1] if evals else None,
        "steps": (first_step, last_step),
    }
