"""T1: a real trial on the tiny model, reported through all three channels."""

from __future__ import annotations

import json
import warnings
import zipfile
from pathlib import Path

from domain.lora import Architecture, verify_adapter
from tests.trainer.fixtures import TOKEN, TrainedRun
from trainer.protocol import Exported, Log, Progress, Status, parse_report_line, report_from_json


def _final(run: TrainedRun) -> Exported:
    final = run.result.final
    assert isinstance(final, Exported), final
    return final


def test_a_trial_runs_at_least_twenty_optimizer_steps_and_the_loss_falls(
    trained_run: TrainedRun,
) -> None:
    steps = [
        r
        for r in trained_run.reports
        if isinstance(r, Progress) and r.phase == "training" and r.loss
    ]
    assert steps[-1].step == steps[-1].total_steps == 24
    assert len({r.step for r in steps}) >= 20
    assert steps[-1].loss is not None and steps[0].loss is not None
    assert steps[-1].loss < steps[0].loss * 0.85, [r.loss for r in steps]
    assert all(r.learning_rate and r.tokens_per_s for r in steps)
    assert _final(trained_run).partial is False


def test_the_export_passes_the_control_planes_verifier_with_what_was_reported(
    trained_run: TrainedRun,
) -> None:
    final = _final(trained_run)
    ws = trained_run.workspace
    arch = Architecture.from_config(
        json.loads((ws.path("models/tiny") / "config.json").read_text())
    )
    for where in (ws.path("data/adapter.zip"), ws.path(final.object_key)):
        with where.open("rb") as f:
            summary = verify_adapter(
                f,
                base_model="storage:models/tiny",
                architecture=arch,
                sha256=final.sha256,
                size_bytes=final.size_bytes,
            )
        assert summary.r == 8 and summary.dtype == "F32" and summary.tensors == 4 * 7 * 2
        assert summary.metrics is not None and summary.metrics["partial"] is False
        assert summary.metrics["step"] == 24
    with zipfile.ZipFile(ws.path("data/adapter.zip")) as z:
        assert [i.filename for i in z.infolist()] == [
            "adapter_config.json",
            "adapter_model.safetensors",
            "tensorant.json",
        ]
        assert {(i.compress_type, i.date_time) for i in z.infolist()} == {
            (0, (1980, 1, 1, 0, 0, 0))
        }


def test_the_adapter_loads_with_peft_without_missing_keys_and_changes_the_logits(
    trained_run: TrainedRun, tmp_path: Path
) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ws = trained_run.workspace
    base_dir = ws.path("models/tiny")
    with zipfile.ZipFile(ws.path("data/adapter.zip")) as z:
        z.extractall(tmp_path)
    tok = AutoTokenizer.from_pretrained(base_dir)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "What colour is the sky?"}],
        tokenize=False,
        add_generation_prompt=True,
    )
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    base = AutoModelForCausalLM.from_pretrained(base_dir).eval()
    with torch.no_grad():
        before = base(ids).logits
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tuned = PeftModel.from_pretrained(base, str(tmp_path)).eval()
    assert not [w for w in caught if "missing" in str(w.message).lower()], [
        str(w.message) for w in caught
    ]
    assert not [w for w in caught if "unexpected" in str(w.message).lower()]
    with torch.no_grad():
        after = tuned(ids).logits
    assert (after - before).abs().max().item() > 1e-2


def test_stdout_lines_mailbox_and_callbacks_carry_the_same_reports(trained_run: TrainedRun) -> None:
    final = _final(trained_run)
    ws = trained_run.workspace
    reports = trained_run.reports
    assert reports[-1] == final
    assert [r.seq for r in reports if r.boot == final.boot] == sorted(
        r.seq for r in reports if r.boot == final.boot
    )
    # result.json is the final report; status.json the last progress; the log chunks every log.
    result = report_from_json(json.loads(ws.path("runs/run-1/result.json").read_text()))
    assert result == final
    status = Status.from_json(json.loads(ws.path("runs/run-1/status.json").read_text()))
    assert status.progress == [r for r in reports if isinstance(r, Progress)][-1]
    assert status.run_id == "run-1" and status.attempt == 1
    chunked = [
        report_from_json(json.loads(line))
        for chunk in sorted(ws.path("runs/run-1/logs").iterdir())
        for line in chunk.read_text().splitlines()
    ]
    assert chunked == [r for r in reports if isinstance(r, Log)]
    # Callbacks: Bearer token, bodies as the reports plus boot and seq, log batches with an id.
    received = trained_run.callbacks
    assert {h.get("Authorization") for _, h, _ in received} == {f"Bearer {TOKEN}"}
    assert all(p.startswith("/v1/trainer/runs/run-1/") for p, _, _ in received)
    assert report_from_json(trained_run.callback_bodies("/exported")[-1]) == final
    assert (
        report_from_json(trained_run.callback_bodies("/progress")[-1])
        == [r for r in reports if isinstance(r, Progress)][-1]
    )
    logged = [line for body in trained_run.callback_bodies("/logs") for line in body["lines"]]
    assert [(x["boot"], x["seq"], x["text"]) for x in logged] == [
        (r.boot, r.seq, r.text) for r in reports if isinstance(r, Log)
    ]
    assert all(len(body["batch"]) == 36 for body in trained_run.callback_bodies("/logs"))


def test_the_run_token_is_never_printed_or_stored(trained_run: TrainedRun) -> None:
    ws = trained_run.workspace
    assert TOKEN not in "\n".join(trained_run.stdout)
    for path in [*ws.root.rglob("*"), *ws.settings.container_disk.rglob("*")]:
        if path.is_file() and not path.is_symlink():
            assert TOKEN.encode() not in path.read_bytes(), path
    assert TOKEN not in repr(ws.settings) and TOKEN not in repr(trained_run.result.reporter)


def test_report_lines_parse_with_the_same_function_the_control_plane_uses(
    trained_run: TrainedRun,
) -> None:
    report_lines = [line for line in trained_run.stdout if line.startswith("TENSORANT-REPORT ")]
    assert report_lines and all(parse_report_line(line) is not None for line in report_lines)
    assert len(report_lines) == len(trained_run.stdout)  # nothing else went to stdout


def test_the_chosen_hyperparameters_are_the_ones_trained_with(
    tmp_path: Path, tiny_model: Path
) -> None:
    """R16: the manifest's rank, alpha, warm-up and validation split are what the trainer
    uses: the adapter has that rank and alpha, the learning rate warms up over the chosen
    fraction, and the held-out rows give every report on the step cadence an eval_loss (R17)
    with the epoch and gradient norm."""
    from dataclasses import replace

    from tests.trainer.fixtures import HYPERPARAMETERS, make_workspace, run_in_process

    hp = replace(
        HYPERPARAMETERS, lora_r=4, lora_alpha=12, warmup_ratio=0.5, validation_fraction=0.25
    )
    hp = replace(hp, max_steps=8)
    ws = make_workspace(tmp_path / "workspace", tiny_model, run_id="run-hp", hyperparameters=hp)
    result, lines = run_in_process(ws)
    final = result.final
    assert isinstance(final, Exported), final
    reports = [parse_report_line(line) for line in lines]
    steps = [r for r in reports if isinstance(r, Progress) and r.phase == "training" and r.step]
    assert [r.step for r in steps] == list(range(1, 9))  # every step: a twentieth of 8 is 1
    assert all(r.eval_loss is not None and r.eval_loss > 0 for r in steps), steps
    assert all(r.grad_norm is not None and r.epoch for r in steps), steps
    rates = [r.learning_rate for r in steps]
    assert rates[:4] == sorted(rates[:4]) and rates[3] == max(rates), rates  # 4 warm-up steps
    held = [r for r in reports if isinstance(r, Log) and r.text.startswith("validation:")]
    assert held and "held out" in held[0].text
    with zipfile.ZipFile(ws.path(final.object_key)) as z:
        config = json.loads(z.read("adapter_config.json"))
        record = json.loads(z.read("tensorant.json"))
        exported = z.read("adapter_model.safetensors")
    assert (config["r"], config["lora_alpha"]) == (4, 12)
    # R17: the adapter is the evaluated state with the lowest eval loss; its record says which
    # step that was, its eval loss and the last one; R18: the seconds and tokens/s measured
    evals = {r.step: r.eval_loss for r in steps}
    best = min(evals, key=lambda step: (evals[step], step))
    assert (record["best_step"], record["best_eval_loss"]) == (best, evals[best]), evals
    assert record["eval_loss"] == evals[8] and record["held_out"] == 12
    assert record["training_seconds"] > record["eval_seconds"] > 0, record
    assert record["tokens_per_s"] > 0 and record["eval_tokens_per_s"] > 0, record
    _assert_same_weights(exported, ws.settings.work_dir / "best" / f"step-{best}")
    assert "base_model_revision" not in record  # a storage model has no Hub commit


def _assert_same_weights(adapter: bytes, best: Path) -> None:
    """The exported LoRA tensors are, one for one, the best checkpoint's (PEFT's saved names
    drop the adapter's name, `.default`)."""
    from safetensors.torch import load, load_file

    saved = load(adapter)
    weights = load_file(best / "adapter.safetensors")
    kept = {k.replace(".default", ""): v for k, v in weights.items()}
    assert saved.keys() == kept.keys()
    assert all(bool((saved[k] == kept[k]).all()) for k in saved)
