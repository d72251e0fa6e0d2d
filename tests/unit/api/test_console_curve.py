"""R17: the run page's curve is drawn from the metric points, thinned for a long run."""

from __future__ import annotations

from api.console.curve import HEIGHT, MAX_DRAWN, WIDTH, curve
from api.schemas.runs import MetricPoint


def _points(losses: list[float], evals: list[float | None] | None = None) -> list[MetricPoint]:
    evals = evals or [None] * len(losses)
    return [
        MetricPoint(step=i + 1, loss=loss, eval_loss=e, time="2026-12-01T10:00:00Z")
        for i, (loss, e) in enumerate(zip(losses, evals, strict=True))
    ]


def _xy(line: str) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in (p.split(",") for p in line.split())]


def test_a_falling_loss_is_a_line_from_the_top_left_to_the_bottom_right() -> None:
    drawn = curve(_points([3.0, 2.0, 1.0], [3.0, None, 2.5]))
    assert drawn is not None
    assert _xy(drawn["train"]) == [(0.0, 0.0), (WIDTH / 2, HEIGHT / 2), (WIDTH, HEIGHT)]
    assert _xy(drawn["eval"]) == [(0.0, 0.0), (WIDTH, 25.0)]
    assert (drawn["first"], drawn["last"], drawn["eval_last"]) == (3.0, 1.0, 2.5)


def test_a_long_run_is_thinned_to_what_the_picture_shows_keeping_its_ends() -> None:
    drawn = curve(_points([10.0 - i / 1000 for i in range(5000)]))
    assert drawn is not None and drawn["points"] == 5000
    xy = _xy(drawn["train"])
    assert len(xy) == MAX_DRAWN and xy[0] == (0.0, 0.0) and xy[-1] == (WIDTH, HEIGHT)


def test_fewer_than_two_losses_draw_nothing() -> None:
    assert curve(_points([2.0])) is None
    assert curve([]) is None
