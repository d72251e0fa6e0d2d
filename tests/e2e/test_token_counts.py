"""P1: an uploaded dataset shows its token counts for the base model a run is drafted with,
over HTTP against `tensorant serve --sandbox`: the tiny model is put on the organization's
volume, a dataset uploaded, a run drafted on `storage:models/tiny`, and the dataset version
(GET /v1/projects/{id}/datasets) then shows the tokens the trainer's own encoder counts with
that model's tokenizer, cut at the draft's max_seq_len."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runpod_sandbox.seed import seeded_credentials
from tests.e2e.conftest import volume_spec
from tests.e2e.served import Served, serve
from tests.e2e.test_real_training import ROWS, Org, _dataset, _ok, _token_of_new_org

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serve(tmp_path_factory.mktemp("tokens"), count_tokens="true") as srv:
        srv.wait_healthy(120)
        yield srv


def _encoder_counts(tiny: Path, max_seq_len: int, work: Path) -> dict[str, int]:
    """What the trainer counts (its "dataset tokens" line): its own loader and encoder."""
    import hashlib

    from transformers import AutoTokenizer

    from trainer import data

    path = work / "colours.jsonl"
    path.write_bytes(_dataset(ROWS))
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    rows = data.load_rows(path, sha256=sha, fmt="chat")
    encoder = data.Encoder(AutoTokenizer.from_pretrained(tiny), max_seq_len)
    examples, _ = data.encode_rows(encoder, rows)
    return {
        "tokens": sum(len(e.input_ids) for e in examples),
        "trained_tokens": sum(e.targets for e in examples),
        "examples": len(examples),
    }


def _counted(org: Org, base_model: str, timeout: float = 120) -> dict[str, Any]:
    project = org.config["project_id"]
    deadline = time.monotonic() + timeout
    while True:
        [dataset] = _ok(org.api.get(f"/v1/projects/{project}/datasets"))
        found = [c for c in dataset["token_counts"] if c["base_model"] == base_model]
        if found:
            return dict(found[0])
        assert time.monotonic() < deadline, f"no token count for {base_model}: {dataset}"
        time.sleep(0.2)


def test_a_drafted_run_shows_its_datasets_tokens_for_the_storage_model(
    served: Served, tiny_model: Path, tmp_path: Path
) -> None:
    creds = seeded_credentials(served.sandbox_port)
    org = Org(served, _token_of_new_org(served, "Tokens"), volume_spec(creds), tiny_model)
    project = org.config["project_id"]
    [before] = _ok(org.api.get(f"/v1/projects/{project}/datasets"))
    assert before["token_counts"] == []

    run = _ok(org.api.post("/v1/runs", json={**org.config, "max_seq_len": 64}), 201)
    assert run["hyperparameters"]["max_seq_len"] == 64
    counted = _counted(org, "storage:models/tiny")
    expected = _encoder_counts(tiny_model, 64, tmp_path)
    assert counted["status"] == "counted", counted
    assert counted["max_seq_len"] == 64
    assert {k: counted[k] for k in expected} == expected
    assert 0 < counted["trained_tokens"] < counted["tokens"]

    shown = _ok(org.api.get(f"/v1/runs/{run['id']}"))
    assert shown["dataset_tokens"] == counted

    # a second draft at another length counts again, with the encoder cut there
    again = {**org.config, "max_seq_len": 128}
    _ok(org.api.post("/v1/runs", json=again), 201)
    deadline = time.monotonic() + 120
    while (recounted := _counted(org, "storage:models/tiny"))["max_seq_len"] != 128:
        assert time.monotonic() < deadline, recounted
        time.sleep(0.2)
    expected = _encoder_counts(tiny_model, 128, tmp_path)
    assert {k: recounted[k] for k in expected} == expected


def test_a_model_without_a_tokenizer_shows_its_count_unavailable_with_why(
    served: Served, tiny_model: Path
) -> None:
    """A storage model whose folder holds no tokenizer (its config only): the dataset shows
    the count as unavailable, and why, instead of numbers."""
    creds = seeded_credentials(served.sandbox_port)
    org = Org(served, _token_of_new_org(served, "NoTokenizer"), volume_spec(creds), tiny_model)
    org.storage.client.put_object(
        Bucket=org.storage.bucket,
        Key="models/bare/config.json",
        Body=(tiny_model / "config.json").read_bytes(),
    )
    run = _ok(
        org.api.post("/v1/runs", json={**org.config, "base_model": "storage:models/bare"}), 201
    )
    counted = _counted(org, "storage:models/bare")
    assert counted["status"] == "unavailable", counted
    assert counted["tokens"] is None and counted["trained_tokens"] is None
    assert "tokenizer" in counted["unavailable"], counted
    assert _ok(org.api.get(f"/v1/runs/{run['id']}"))["dataset_tokens"] == counted
