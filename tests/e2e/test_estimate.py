"""R18 over HTTP: a draft carries its estimate (steps, tokens, minutes, cost) from its dataset
version and the GPU's throughput; a full run drafted after its trial uses the trial's measured
tokens/s; once a run ended its actual minutes and cost stand beside the estimate, and (R19) a
succeeded run names its lineage."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from domain.estimate import BOOT_SECONDS, EXPORT_SECONDS, TOKENS_PER_S
from tests.e2e.conftest import Api
from tests.e2e.flows import A100, draft, launch, ready, upload_dataset, wait_state

# What the sandbox's trainer reports as tokens_per_s on each training step
SANDBOX_TOKENS_PER_S = 1234.5
FORTY_ROWS = b"".join(
    b'{"messages": [{"role": "user", "content": "Where is my order %d?"}, '
    b'{"role": "assistant", "content": "It ships tomorrow, by noon."}]}\n' % i
    for i in range(40)
)


def test_r18_a_draft_has_an_estimate_a_full_run_uses_its_trials_tokens_per_s_r19_lineage(
    api: Api, creds: dict[str, Any]
) -> None:
    org, config = ready(api, creds, name="Estimate")
    dataset = upload_dataset(org, config["project_id"], "forty", data=FORTY_ROWS)
    config = {**config, "dataset_version_id": dataset["id"]}  # a full run needs ten rows
    trial = draft(org, config, epochs=2, max_seq_len=512, validation_fraction=0.1)
    est = org.member.get(f"/v1/runs/{trial['id']}").json()["estimate"]
    # This organization has no run on the A100 yet: the documented table's figure.
    assert est["throughput_source"] == "table" and est["tokens_per_s"] == TOKENS_PER_S[A100]
    rows = dataset["row_count"]
    assert rows == 40
    train_rows = rows - round(rows * 0.1)
    per_row = min(math.ceil(dataset["size_bytes"] / rows / 4), 512)
    assert est["tokens"] == train_rows * per_row * 2
    assert est["steps"] == math.ceil(2 * train_rows / 16)
    assert est["minutes"] >= math.ceil((BOOT_SECONDS + EXPORT_SECONDS) / 60)
    assert Decimal(est["cost"]) >= Decimal("2.00") * est["minutes"] / 60
    assert trial["actual"] is None

    launch(org, trial["id"])
    done = wait_state(org, trial["id"], "succeeded", timeout=90)
    assert done["actual"] is not None
    assert Decimal(done["actual"]["cost"]) == Decimal(done["cost_so_far"])
    assert done["actual"]["minutes"] == round(done["runtime_seconds"] / 60, 1)
    # R19: the succeeded run names what its adapter was made from
    lineage = done["lineage"]
    assert lineage["dataset_version_id"] == dataset["id"]
    assert lineage["dataset_sha256"] == dataset["sha256"]
    assert lineage["hyperparameters"] == done["hyperparameters"]
    assert lineage["hyperparameters"]["epochs"] == 2
    assert lineage["base_model"] == config["base_model"]
    assert lineage["adapter_sha256"] == done["adapter"]["sha256"]
    assert lineage["image"] and lineage["trainer_version"]
    # R19: the Hub commit the launch resolved the base model's main to (the sandbox's Hub)
    assert lineage["base_model_revision"] == api.sandbox.hub.repos[config["base_model"]].sha
    assert trial["lineage"] is None  # a draft has none
    # R17/R18: what the verified adapter records of its training; the actual training time
    assert done["training"]["train_loss"] == 0.4 and done["training"]["steps"] == 5
    assert done["actual"]["training_seconds"] == done["training"]["training_seconds"] == 5.0

    full = draft(org, config, kind="full", baseline_run_id=trial["id"])
    est = full["estimate"]
    assert full["lineage"] is None
    assert est["throughput_source"] == "baseline" and est["throughput_run_id"] == trial["id"]
    assert est["tokens_per_s"] == SANDBOX_TOKENS_PER_S
    # R17: the full run shows its trial's figures beside its own
    assert full["baseline"] == {
        "run_id": trial["id"],
        "state": "succeeded",
        "train_loss": 0.4,
        "eval_loss": None,
        "best_eval_loss": None,
        "tokens_per_s": SANDBOX_TOKENS_PER_S,
    }
    # Another trial on the same GPU and base model learns from the earlier one as well.
    again = draft(org, config)
    assert again["estimate"]["throughput_source"] == "earlier_run"
    assert again["estimate"]["tokens_per_s"] == SANDBOX_TOKENS_PER_S
