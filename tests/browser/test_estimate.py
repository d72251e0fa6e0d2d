"""R18 in the console: the launch review shows the estimated minutes and cost beside the price
and runtime limit, and warns when the runtime limit is shorter than the estimate; a trained run's
page shows the estimate beside the actual, and (R19) its lineage with a peft and a vLLM snippet."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import Browser, expect

from tests.browser.conftest import Console, describe
from tests.e2e.conftest import Api
from tests.e2e.flows import draft, launch, ready, until, upload_dataset


def test_r18_the_launch_review_shows_the_estimated_cost_and_warns_of_a_short_limit(
    browser: Browser, stack: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(stack, creds, name="Estimates")
    roomy = draft(org, config, max_runtime_minutes=240)
    # One epoch over a tiny dataset still needs the boot: more than one minute.
    short = draft(org, config, max_runtime_minutes=1)
    estimate = org.member.get(f"/v1/runs/{roomy['id']}").json()["estimate"]
    c = Console(browser, stack.base_url)
    try:
        p = c.sign_in(org.tokens["member"])
        p.goto(f"/runs/{roomy['id']}?confirm=launch")
        shown = p.locator("[data-launch-estimate]")
        expect(shown).to_contain_text(f"{estimate['minutes']} minutes")
        expect(shown).to_contain_text(f"${estimate['cost']}")
        expect(p.locator("[data-hourly-price]")).to_be_visible()
        expect(p.locator("[data-runtime-warning]")).to_have_count(0)
        expect(p.locator("[data-estimate]")).to_contain_text(f"${estimate['cost']}")
        critical = c.axe()
        assert not critical, describe(critical)

        p.goto(f"/runs/{short['id']}?confirm=launch")
        expect(p.locator("[data-runtime-warning]")).to_contain_text(
            "The runtime limit (1 min) is shorter than the estimate"
        )
    finally:
        c.close()


def test_r18_r19_a_trained_run_page_shows_estimate_beside_actual_lineage_and_snippets(
    browser: Browser, stack: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(stack, creds, name="Lineage")
    rows = b"".join(b'{"prompt": "Q%d", "completion": "A"}\n' % i for i in range(12))
    dataset = upload_dataset(org, config["project_id"], "twelve", data=rows)
    config = {**config, "dataset_version_id": dataset["id"]}  # a full run needs ten rows
    run = draft(org, config, lora_rank=24)
    launch(org, run["id"])
    done = until(
        lambda: (r := org.member.get(f"/v1/runs/{run['id']}").json())["state"] == "succeeded" and r,
        timeout=90,
    )
    sha = done["lineage"]["dataset_sha256"]
    c = Console(browser, stack.base_url)
    try:
        p = c.sign_in(org.tokens["member"])
        p.goto(f"/runs/{run['id']}")
        expect(p.locator("[data-estimate]")).to_contain_text(
            f"actual {done['actual']['minutes']} min, ${done['actual']['cost']}"
        )
        lineage = p.locator("[data-lineage]")
        expect(lineage).to_contain_text(sha)
        expect(lineage).to_contain_text(config["base_model"])
        expect(p.locator("[data-snippet=peft]")).to_contain_text(
            f'AutoModelForCausalLM.from_pretrained("{config["base_model"]}"'
        )
        expect(p.locator("[data-snippet=peft]")).to_contain_text(
            'PeftModel.from_pretrained(base, "./adapter")'
        )
        # vLLM takes a LoRA rank limit of 16, 32, 64, ...: rank 24 needs 32
        expect(p.locator("[data-snippet=vllm]")).to_contain_text(
            f"vllm serve {config['base_model']} --enable-lora --max-lora-rank 32"
        )
        # R19: the Hub commit the launch pinned; R17: the run's results, training time
        expect(lineage.locator("[data-revision]")).to_have_text(
            stack.sandbox.hub.repos[config["base_model"]].sha
        )
        expect(p.locator("[data-results-run]")).to_contain_text("0.4000")
        expect(p.locator("[data-training-time]")).to_contain_text("actual 5.0 s")
        critical = c.axe()
        assert not critical, describe(critical)
        # a full run drafted from it shows the trial's figures beside its own
        full = draft(org, config, kind="full", baseline_run_id=run["id"])
        p.goto(f"/runs/{full['id']}")
        baseline = p.locator("[data-results-baseline]")
        expect(baseline).to_contain_text("Trial baseline")
        expect(baseline).to_contain_text("0.4000")
        expect(baseline).to_contain_text("1234.5")
        critical = c.axe()
        assert not critical, describe(critical)
    finally:
        c.close()
