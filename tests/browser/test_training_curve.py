"""R17 on the run page: once a run has trained, its page draws the training curve of the
metric points the API serves, with a caption a screen reader reads."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Browser, expect

from tests.browser.conftest import Console, describe
from tests.e2e.conftest import Api
from tests.e2e.flows import draft, launch, ready, until


def test_a_trained_run_page_draws_its_loss_curve_from_the_metric_points(
    browser: Browser, stack: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(stack, creds, name="Curve")
    run = draft(org, config, lora_rank=8)
    launch(org, run["id"])
    until(
        lambda: org.member.get(f"/v1/runs/{run['id']}").json()["state"] == "succeeded",
        timeout=90,
    )
    # The sandbox's trainer reports five steps, loss 2/step
    points = org.member.get(f"/v1/runs/{run['id']}/metrics").json()["points"]
    assert [(p["step"], p["loss"]) for p in points] == [
        (1, 2.0),
        (2, 1.0),
        (3, 0.6667),
        (4, 0.5),
        (5, 0.4),
    ]
    c = Console(browser, stack.base_url)
    try:
        p = c.sign_in(org.tokens["member"])
        p.goto(f"/runs/{run['id']}")
        figure = p.locator("[data-curve]")
        expect(figure.locator("figcaption")).to_contain_text(
            "Training loss 2.0 → 0.4 over 5 points (steps 1–5)"
        )
        line = figure.locator("[data-train-loss]").get_attribute("points") or ""
        ys = [float(xy.split(",")[1]) for xy in line.split()]
        assert len(ys) == 5 and ys == sorted(ys), line  # falling loss: y grows downwards
        expect(p.locator("[data-hyperparameters]")).to_contain_text("lora_rank 8,")
        expect(p.locator("[data-hyperparameters]")).to_contain_text("epochs 1 (default)")
        critical = c.axe()
        assert not critical, describe(critical)
    finally:
        c.close()
