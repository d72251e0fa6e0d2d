"""Benchmark (T1): the trainer's training loop vs a plain transformers + peft loop.

Run (CPU; not part of the pytest suite):

    uv run python bench/trainer_speed.py                      # 30 optimizer steps × 5 rounds
    uv run python bench/trainer_speed.py --steps 60 --rounds 7
    uv run python bench/trainer_speed.py --report-every-step  # a progress report per step

Both loops train the same tiny model (trainer/tiny.py: Llama architecture, 1 M parameters) with
the same LoRA config, the same AdamW, the same micro-batches in the same order (4 rows × 2
accumulated, masked to the completion), in the same process, each round from a freshly loaded
model; within a round the two run back to back, and which goes first alternates between rounds.
Ours is `trainer.loop.Training` as the Pod runs it: progress through the Reporter (stdout line,
status.json in a mailbox folder with fsync, at the trainer's default interval, or after every
step with --report-every-step), the SIGTERM flag checked between micro-batches, the checkpoint
policy consulted, gradient clipping and the learning-rate schedule, loss normalised over the
accumulated completion tokens. The plain loop is the textbook one: forward with labels, loss /
accumulation, backward, step. Model loading is outside both timings. It prints steps/s and
tokens/s of each (median over rounds) and the ratio (the median of the rounds' ratios, since
both halves of a round share the machine's load), with PASS when ours reaches at least 90% of
the plain loop's steps/s.

The machine may be shared and noisy: run it more than once before reading much into a figure.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET = 0.90


def _load(model_dir: Path, hp: Any) -> Any:
    from trainer.model import add_lora, load_model

    _, base = load_model(model_dir, *_device())
    return add_lora(base, hp, checkpointing=False)


def _device() -> tuple[Any, Any]:
    from trainer.model import pick_device

    return pick_device()


def ours(
    model_dir: Path,
    examples: list[Any],
    hp: Any,
    steps: int,
    pad_id: int,
    work: Path,
    progress_s: float,
) -> float:
    import torch

    from trainer.loop import Batches, Training
    from trainer.mailbox import VolumeMailbox
    from trainer.reporter import Reporter
    from trainer.settings import Settings

    torch.manual_seed(hp.seed)
    model = _load(model_dir, hp)
    settings = Settings(
        run_id="bench",
        token="",
        callback_url="",
        manifest_url="",
        workspace=work,
        container_disk=work / "disk",
    )
    reporter = Reporter("bench", VolumeMailbox(settings), progress_s=progress_s, out=io.StringIO())
    training = Training(
        model,
        Batches(examples, hp.batch_size, hp.seed, pad_id),
        hp,
        steps,
        _device()[0],
        stop_requested=lambda: False,
        on_progress=lambda o, lr, tps: reporter.progress(
            "training", o.step, o.total_steps, loss=o.last_loss, learning_rate=lr, tokens_per_s=tps
        ),
        on_micro_batch=lambda _step: reporter.tick(),
    )
    started = time.perf_counter()
    outcome = training.run()
    seconds = time.perf_counter() - started
    reporter.close()
    assert outcome.step == steps
    return seconds


def plain(model_dir: Path, examples: list[Any], hp: Any, steps: int, pad_id: int) -> float:
    import torch
    from torch.nn.utils.rnn import pad_sequence

    from trainer.loop import Batches

    torch.manual_seed(hp.seed)
    model = _load(model_dir, hp)
    model.train()
    order = Batches(examples, hp.batch_size, hp.seed, pad_id)  # only to pick the same rows
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=hp.learning_rate, weight_decay=0.0)
    ga = hp.gradient_accumulation
    started = time.perf_counter()
    for step in range(steps):
        for j in range(ga):
            rows = order.rows(step * ga + j)
            ids = pad_sequence(
                [torch.tensor(r.input_ids) for r in rows], batch_first=True, padding_value=pad_id
            )
            labels = pad_sequence(
                [torch.tensor(r.labels) for r in rows], batch_first=True, padding_value=-100
            )
            mask = pad_sequence(
                [torch.ones(len(r.input_ids), dtype=torch.long) for r in rows], batch_first=True
            )
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss / ga
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--report-every-step", action="store_true")
    args = parser.parse_args()

    from dataclasses import replace

    from transformers import AutoTokenizer

    from trainer.data import Encoder, encode_rows
    from trainer.protocol import Hyperparameters
    from trainer.settings import Tunables
    from trainer.tiny import build_tiny_model, demo_rows, rows_text

    hp = replace(
        Hyperparameters(),
        lora_r=8,
        lora_alpha=16,
        learning_rate=5e-3,
        batch_size=4,
        gradient_accumulation=2,
        max_seq_len=128,
        seed=7,
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        rows = demo_rows(64)
        model_dir = build_tiny_model(root / "tiny", rows_text(rows))
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        examples, _ = encode_rows(Encoder(tokenizer, hp.max_seq_len), rows)
        tokens_per_step = [
            sum(
                len(r.input_ids)
                for j in range(hp.gradient_accumulation)
                for r in _rows(examples, hp, s, j)
            )
            for s in range(args.steps)
        ]
        tokens = sum(tokens_per_step)
        pad = tokenizer.pad_token_id
        progress_s = 0.0 if args.report_every_step else Tunables().progress_s
        # Warm-up (first-call allocations, lazy imports), not timed.
        ours(model_dir, examples, hp, 2, pad, root / "warm", progress_s)
        plain(model_dir, examples, hp, 2, pad)
        times: dict[str, list[float]] = {"ours": [], "plain": []}
        for i in range(args.rounds):
            for name in ("ours", "plain") if i % 2 == 0 else ("plain", "ours"):
                if name == "ours":
                    work = root / f"run-{i}"
                    seconds = ours(model_dir, examples, hp, args.steps, pad, work, progress_s)
                else:
                    seconds = plain(model_dir, examples, hp, args.steps, pad)
                times[name].append(seconds)
            print(
                f"round {i + 1}: ours {times['ours'][-1]:.2f} s, plain {times['plain'][-1]:.2f} s",
                flush=True,
            )
    rate = {k: args.steps / statistics.median(v) for k, v in times.items()}
    for k in ("ours", "plain"):
        print(f"{k:5}: {rate[k]:6.2f} steps/s  {rate[k] * tokens / args.steps:8.0f} tokens/s")
    ratio = statistics.median(p / o for o, p in zip(times["ours"], times["plain"], strict=True))
    verdict = "PASS" if ratio >= TARGET else "MISS"
    print(f"ratio (ours / plain steps/s): {ratio:.3f}  target >= {TARGET:.2f}: {verdict}")
    return 0 if verdict == "PASS" else 1


def _rows(examples: list[Any], hp: Any, step: int, j: int) -> list[Any]:
    from trainer.loop import Batches

    return Batches(examples, hp.batch_size, hp.seed, 0).rows(step * hp.gradient_accumulation + j)


if __name__ == "__main__":
    sys.exit(main())
