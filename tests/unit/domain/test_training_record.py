"""R17–R19: what a verified adapter's tensorant.json may put on the run: only known figures, each
finite and in bounds, and a commit sha that is one; anything else never reaches the log."""

from __future__ import annotations

from domain.training_record import training_record


def test_known_figures_are_kept_under_the_runs_names() -> None:
    record = training_record(
        {
            "step": 23,
            "last_loss": 1.25,
            "eval_loss": 1.5,
            "best_step": 20,
            "best_eval_loss": 1.4,
            "tokens_per_s": 800,
            "training_seconds": 12.5,
            "base_model_revision": "0123456789abcdef0123456789abcdef01234567",
            "hyperparameters": {"epochs": 1},  # kept elsewhere (the run's own), not here
        }
    )
    assert record == {
        "steps": 23,
        "train_loss": 1.25,
        "eval_loss": 1.5,
        "best_step": 20,
        "best_eval_loss": 1.4,
        "tokens_per_s": 800.0,
        "training_seconds": 12.5,
        "base_model_revision": "0123456789abcdef0123456789abcdef01234567",
    }


def test_what_is_not_a_finite_figure_in_bounds_or_a_commit_is_left_out() -> None:
    assert training_record(None) is None and training_record([1]) is None  # type: ignore[arg-type]
    assert training_record({"partial": True, "steps": 5, "final_loss": 0.4}) is None
    record = training_record(
        {
            "step": True,
            "best_step": -1,
            "tokens": 10**16,
            "last_loss": float("nan"),
            "eval_loss": "1.0",
            "tokens_per_s": float("inf"),
            "training_seconds": 3.0,
            "base_model_revision": "main; rm -rf /",
        }
    )
    assert record == {"training_seconds": 3.0}
