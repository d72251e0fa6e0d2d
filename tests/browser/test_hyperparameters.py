"""R16 in the console: Configure a run shows the hyperparameters under "Advanced", filled with
the base model's defaults; a changed one is saved as chosen, the rest stay defaults."""

from __future__ import annotations

from typing import Any

from playwright.sync_api import expect

from tests.browser.conftest import Console
from tests.e2e.conftest import Api, Org, connect, volume_spec
from tests.e2e.flows import upload_dataset

A100 = "NVIDIA A100 80GB PCIe"


def test_the_advanced_hyperparameters_show_defaults_and_save_what_was_changed(
    console: Console, stack: Api, org: Org, creds: dict[str, Any]
) -> None:
    connect(org, creds)
    card = org.owner.put("/v1/storage", json=volume_spec(creds))
    assert card.status_code == 200, card.text
    project = org.member.post("/v1/projects", json={"name": "advanced"}).json()
    upload_dataset(org, project["id"], "chats")
    p = console.sign_in(org.tokens["member"])
    p.goto(f"{stack.base_url}/runs/new")
    p.locator("#advanced summary").click()
    # Qwen2.5-7B (the form's default base model): a 7B model's defaults
    expect(p.get_by_label("learning_rate", exact=True)).to_have_value("0.0002")
    expect(p.get_by_label("lora_rank", exact=True)).to_have_value("16")
    expect(p.get_by_label("epochs", exact=True)).to_have_value("1")
    p.get_by_label("lora_rank", exact=True).fill("32")
    p.get_by_label("validation_fraction", exact=True).fill("0.1")
    p.locator(f'input[name="gpu_type_id"][value="{A100}"]').check()
    p.get_by_role("button", name="Save trial draft").click()
    p.wait_for_url(f"{stack.base_url}/runs/*")
    run_id = p.url.rstrip("/").split("/")[-1]
    run = org.member.get(f"/v1/runs/{run_id}").json()
    assert run["hyperparameters"]["lora_rank"] == 32, run
    assert run["hyperparameters"]["validation_fraction"] == 0.1, run
    assert "lora_rank" not in run["defaults"] and "validation_fraction" not in run["defaults"]
    assert "learning_rate" in run["defaults"] and "epochs" in run["defaults"], run["defaults"]
    p.goto(f"{stack.base_url}/runs/{run_id}/edit")
    p.locator("#advanced summary").click()
    expect(p.get_by_label("lora_rank", exact=True)).to_have_value("32")
    p.get_by_label("epochs", exact=True).fill("0")  # out of bounds: the browser stops it
    p.get_by_role("button", name="Save changes").click()
    assert p.url.endswith("/edit")
    assert org.member.get(f"/v1/runs/{run_id}").json()["hyperparameters"]["epochs"] == 1
