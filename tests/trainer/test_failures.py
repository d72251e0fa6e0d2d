"""T1: every way a run can fail ends in one `failed` report with a stable reason code, written
to result.json like an export, never a traceback and a silent container."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.trainer.fixtures import HYPERPARAMETERS, Workspace, make_workspace, run_in_process
from trainer.errors import Interrupted, TrainerFailure
from trainer.protocol import BaseModelSpec, Failed, report_from_json


def _fail(ws: Workspace) -> Failed:
    result, _ = run_in_process(ws)
    assert isinstance(result.final, Failed), result.final
    on_volume = report_from_json(
        json.loads(ws.path(f"runs/{ws.settings.run_id}/result.json").read_text())
    )
    assert on_volume == result.final
    return result.final


def _rewrite_manifest(ws: Workspace, **changes: Any) -> Workspace:
    manifest = replace(ws.manifest, **changes)
    ws.path(f"runs/{ws.settings.run_id}/manifest.json").write_text(manifest.dumps())
    return Workspace(ws.root, ws.settings, manifest)


def _bad_manifest(ws: Workspace, _mp: pytest.MonkeyPatch) -> Workspace:
    ws.path("runs/run-1/manifest.json").write_text('{"version": 1, "run_id": "run-1"}')
    return ws


def _missing_dataset(ws: Workspace, _mp: pytest.MonkeyPatch) -> Workspace:
    ws.path("datasets/run-1.jsonl").unlink()
    return ws


def _changed_dataset(ws: Workspace, _mp: pytest.MonkeyPatch) -> Workspace:
    with ws.path("datasets/run-1.jsonl").open("a") as f:
        f.write('{"prompt": "added later", "completion": "after the check"}\n')
    return ws


def _invalid_dataset(ws: Workspace, _mp: pytest.MonkeyPatch) -> Workspace:
    path = ws.path("datasets/run-1.jsonl")
    path.write_text(path.read_text() + "not json\n")
    import hashlib

    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    return _rewrite_manifest(ws, dataset=replace(ws.manifest.dataset, sha256=sha))


def _no_model_folder(ws: Workspace, _mp: pytest.MonkeyPatch) -> Workspace:
    return _rewrite_manifest(ws, base_model=BaseModelSpec(source="storage", path="models/absent"))


def _uncached_hub_model_offline(ws: Workspace, _mp: pytest.MonkeyPatch) -> Workspace:
    return _rewrite_manifest(ws, base_model=BaseModelSpec(source="hub", id="tensorant/not-cached"))


def _raises(
    target: str, error: BaseException
) -> Callable[[Workspace, pytest.MonkeyPatch], Workspace]:
    def arrange(ws: Workspace, mp: pytest.MonkeyPatch) -> Workspace:
        def boom(*_args: Any, **_kwargs: Any) -> Any:
            raise error

        mp.setattr(target, boom)
        return ws

    return arrange


CASES = {
    "manifest_invalid": _bad_manifest,
    "dataset_unavailable": _missing_dataset,
    "dataset_changed": _changed_dataset,
    "dataset_invalid": _invalid_dataset,
    "base_model_unavailable": _no_model_folder,
    "base_model_unavailable (Hub, offline, not cached)": _uncached_hub_model_offline,
    "out_of_memory": _raises("trainer.model.load_model", MemoryError()),
    "interrupted": _raises("trainer.data.load_rows", Interrupted()),
    "internal_error": _raises("trainer.data.encode_rows", RuntimeError("a bug")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_failure_before_training_is_reported_with_its_reason(
    case: str, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ws = CASES[case](make_workspace(tmp_path / "workspace", tiny_model), monkeypatch)
    failed = _fail(ws)
    assert failed.reason == case.split(" ", maxsplit=1)[0], failed.detail
    if case == "dataset_invalid":
        assert "line 49: not valid JSON" in failed.detail


def test_a_loss_that_becomes_nan_fails_as_diverged(
    tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from trainer import model

    add_lora = model.add_lora

    def poisoned(*args: Any, **kwargs: Any) -> Any:
        peft_model = add_lora(*args, **kwargs)
        with torch.no_grad():
            next(p for n, p in peft_model.named_parameters() if "lora_A" in n).fill_(float("nan"))
        return peft_model

    monkeypatch.setattr(model, "add_lora", poisoned)
    ws = make_workspace(
        tmp_path / "workspace", tiny_model, hyperparameters=replace(HYPERPARAMETERS, max_steps=2)
    )
    failed = _fail(ws)
    assert failed.reason == "training_diverged" and "step 1" in failed.detail


def test_an_export_that_cannot_be_written_fails_as_export_failed(
    tiny_model: Path, tmp_path: Path
) -> None:
    ws = make_workspace(
        tmp_path / "workspace", tiny_model, hyperparameters=replace(HYPERPARAMETERS, max_steps=1)
    )
    ws.path("data").write_text("a file where the recovery folder belongs")
    failed = _fail(ws)
    assert failed.reason == "export_failed", failed.detail


def test_a_hub_model_cached_on_the_volume_is_used_without_the_network(
    tiny_model: Path, tmp_path: Path
) -> None:
    """Later runs on the same volume skip the download (HF_HUB_OFFLINE=1 in these tests)."""
    from trainer.model import resolve_base_model

    ws = make_workspace(tmp_path / "workspace", tiny_model)
    repo = ws.settings.hf_cache / "models--tensorant--tiny"
    commit = "0" * 40
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    shutil.copytree(tiny_model, repo / "snapshots" / commit)
    folder = resolve_base_model(ws.settings, BaseModelSpec(source="hub", id="tensorant/tiny"))
    assert folder == repo / "snapshots" / commit and (folder / "config.json").is_file()
    with pytest.raises(TrainerFailure) as failure:
        resolve_base_model(ws.settings, BaseModelSpec(source="hub", id="tensorant/elsewhere"))
    assert failure.value.reason == "base_model_unavailable"
