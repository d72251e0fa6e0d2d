"""One start of the trainer (T1): restart check, load, train, export, report.

A restarted container that finds its final report on the volume only shows it again; one
without it resumes from its newest complete checkpoint."""

from __future__ import annotations

import os
import platform
import random
import sys
import time
import traceback
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from trainer import __version__, transfer
from trainer.best import BestCheckpoint
from trainer.callbacks import CallbackSender
from trainer.checkpoint import CheckpointStore
from trainer.deadline import Clock, Deadline, either
from trainer.errors import Interrupted, TrainerFailure
from trainer.mailbox import Mailbox, PresignedMailbox, VolumeMailbox, write_atomically
from trainer.protocol import Exported, Failed, FailureReason, Manifest, ManifestError
from trainer.protocol.layout import ENV_CLOCK_URL
from trainer.reporter import Reporter, read_final_record
from trainer.settings import Settings, SettingsError
from trainer.stop import EXPORTING, TRAINING, StopSignal

MAX_MANIFEST_BYTES = 1 << 20
# Custom S3: each log chunk spends one of the manifest's presigned URLs, so chunks are written
# at most once a minute (a pool of max_runtime_minutes + 10 URLs lasts the whole run).
PRESIGNED_LOG_FLUSH_S = 60.0


@dataclass
class RunResult:
    final: Exported | Failed
    already_finished: bool = False
    resumed_from: int = 0
    reporter: Reporter | None = None


def read_manifest(settings: Settings) -> Manifest:
    url = settings.manifest_url
    try:
        if url.startswith("file://"):
            path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
            data = settings.on_volume(path).read_bytes()
        elif url.startswith(("http://", "https://")):
            data = transfer.get_bytes(url, limit=MAX_MANIFEST_BYTES)
        else:
            data = settings.on_volume(url).read_bytes()
    except (OSError, SettingsError) as e:
        raise ManifestError(f"cannot read the manifest: {e}") from None
    manifest = Manifest.loads(data)
    if manifest.run_id != settings.run_id:
        raise ManifestError(f"the manifest is for run {manifest.run_id}, not {settings.run_id}")
    return manifest


def _attempt(work: Path) -> int:
    """Which start of the container this is (1, 2, ...), kept on the volume."""
    counter = work / "attempts"
    try:
        n = int(counter.read_text()) + 1
    except (OSError, ValueError):
        n = 1
    write_atomically(counter, str(n).encode())
    return n


def make_reporter(
    settings: Settings, manifest: Manifest | None, attempt: int, out: TextIO | None = None
) -> Reporter:
    t = settings.tunables
    mailbox: Mailbox | None = None
    log_flush_s = t.log_flush_s
    if manifest is not None and manifest.mailbox is not None:
        mailbox = PresignedMailbox(settings, manifest.mailbox)
        log_flush_s = max(log_flush_s, PRESIGNED_LOG_FLUSH_S)
    elif manifest is not None or settings.manifest_url.startswith("file://"):
        mailbox = VolumeMailbox(settings)
    callbacks = None
    if settings.callback_url:
        callbacks = CallbackSender(
            settings.callback_url, settings.run_id, settings.token, timeout_s=t.callback_timeout_s
        )
    return Reporter(
        settings.run_id,
        mailbox,
        callbacks=callbacks,
        final_record=settings.work_dir / "final.json",
        heartbeat_s=t.heartbeat_s,
        progress_s=t.progress_s,
        log_flush_s=log_flush_s,
        attempt=attempt,
        out=out,
    )


def run(settings: Settings, stop: StopSignal, *, out: TextIO | None = None) -> RunResult:
    settings.work_dir.mkdir(parents=True, exist_ok=True)
    settings.container_disk.mkdir(parents=True, exist_ok=True)
    attempt = _attempt(settings.work_dir)
    try:
        manifest: Manifest | None = read_manifest(settings)
        problem = None
    except ManifestError as e:
        manifest, problem = None, str(e)
    reporter = make_reporter(settings, manifest, attempt, out)
    previous = read_final_record(settings.work_dir / "final.json")
    if previous is not None:
        note = f"tensorant-trainer: run {settings.run_id} already reported {previous.type}; idling"
        print(note, file=out or sys.stdout, flush=True)
        reporter.redeliver(previous)
        return RunResult(previous, already_finished=True, reporter=reporter)
    if manifest is None:
        final: Exported | Failed = reporter.failed(FailureReason.MANIFEST_INVALID, problem or "")
        return RunResult(final, reporter=reporter)
    reporter.log(
        f"tensorant-trainer {__version__} (python {platform.python_version()}) run "
        f"{settings.run_id} attempt {attempt} boot {reporter.boot}"
    )
    session = _Session(settings, manifest, reporter, stop)
    try:
        final = session.train_and_export()
    except TrainerFailure as f:
        final = reporter.failed(f.reason, f.detail)
    except Interrupted:
        final = reporter.failed(FailureReason.INTERRUPTED, "stopped before training began")
    except MemoryError:
        final = reporter.failed(FailureReason.OUT_OF_MEMORY, "the host ran out of memory")
    except Exception as e:
        if type(e).__name__ == "OutOfMemoryError":  # torch.OutOfMemoryError (CUDA)
            final = reporter.failed(FailureReason.OUT_OF_MEMORY, str(e).splitlines()[0])
        else:
            reporter.log(traceback.format_exc()[-4000:])
            final = reporter.failed(FailureReason.INTERNAL_ERROR, f"{type(e).__name__}: {e}")
    return RunResult(final, resumed_from=session.resumed_from, reporter=reporter)


class _Session:
    def __init__(
        self, settings: Settings, manifest: Manifest, reporter: Reporter, stop: StopSignal
    ):
        self.s = settings
        self.m = manifest
        self.r = reporter
        self.stop = stop
        self.resumed_from = 0
        self.held_out: list[Any] = []  # R16: examples held out to measure eval_loss
        self.training: Any = None
        self.best: BestCheckpoint | None = None  # R17: the lowest eval loss's weights
        # R17/R18: the last eval loss, and the time and tokens spent evaluating (the control
        # plane's estimate measures training and evaluation apart)
        self.eval_loss: float | None = None
        self.eval_s = 0.0
        self.eval_tokens = 0

    def train_and_export(self) -> Exported | Failed:
        from trainer import data, loop, model

        s, m, r = self.s, self.m, self.r
        hp = m.hyperparameters
        r.progress("loading", 0, 0, force=True)
        dataset_path = self._dataset()
        rows = data.load_rows(dataset_path, sha256=m.dataset.sha256, fmt=m.dataset.format)
        if m.kind == "trial":
            rows = data.sample_rows(rows, m.trial.max_rows, hp.seed)
        r.log(f"dataset: {len(rows)} rows ({m.dataset.format})")
        folder = model.resolve_base_model(s, m.base_model, self._on_download)
        r.tick()
        device, dtype = model.pick_device()
        r.log(f"base model {m.base_model.name} on {device} ({str(dtype).removeprefix('torch.')})")
        _seed(hp.seed)
        tokenizer, base = model.load_model(folder, device, dtype)
        encoder = data.Encoder(tokenizer, hp.max_seq_len)
        examples, dropped = data.encode_rows(encoder, rows)
        if dropped:
            r.log(f"{dropped} rows left out: nothing of their completion fits in max_seq_len")
        seen = sum(len(e.input_ids) for e in examples)
        learned = sum(e.targets for e in examples)
        r.log(f"dataset tokens: {seen} in {len(examples)} examples, {learned} of them trained")
        examples = self._hold_out(examples)
        peft_model = model.add_lora(base, hp, checkpointing=device.type == "cuda")
        deadline = self._deadline(peft_model)
        cap = m.trial.max_steps if m.kind == "trial" else None
        total = loop.total_steps(len(examples), hp, cap)
        batches = loop.Batches(examples, hp.batch_size, hp.seed, tokenizer.pad_token_id)
        training = loop.Training(
            peft_model,
            batches,
            hp,
            total,
            device,
            stop_requested=either(self.stop, deadline),
            on_progress=self._on_progress,
            checkpoints=CheckpointStore(s.work_dir / "checkpoints"),
            checkpoint_s=s.tunables.checkpoint_s,
            checkpoint_steps=s.tunables.checkpoint_steps,
            boot=r.boot,
            on_micro_batch=lambda _step: r.tick(),
            on_note=r.log,
        )
        self.training = training
        self.resumed_from = training.resume()
        if self.resumed_from:
            r.log(f"resumed from the checkpoint at step {self.resumed_from} of {total}")
        budget = hp.micro_batch_tokens
        r.log(
            f"training {total} steps on {len(examples)} examples"
            + (f", at most {budget} tokens a forward pass" if budget else "")
        )
        r.progress("training", self.resumed_from, total, force=True)
        outcome, tokens_before, training_s = self._train(training)
        if deadline.reached and not self.stop.requested:
            r.log(
                f"stopped training at step {outcome.step} of {total}: the run's limit is at "
                f"{m.deadline}, and the export keeps {deadline.reserve_s:.0f}s"
            )
        # An interrupted loop returns normally: it is a partial adapter, never a complete one.
        partial = outcome.interrupted or outcome.step < total
        if partial and outcome.step == 0:
            return r.failed(FailureReason.INTERRUPTED, "stopped before the first optimizer step")
        r.progress("exporting", outcome.step, total, loss=outcome.last_loss, force=True)
        metrics = {
            "run_id": m.run_id,
            "kind": m.kind,
            "base_model": m.base_model.name,
            "partial": partial,
            "step": outcome.step,
            "total_steps": total,
            "first_loss": outcome.first_loss,
            "last_loss": outcome.last_loss,
            "rows": len(rows),
            "examples": len(examples),
            "tokens": outcome.tokens,
            "dataset_tokens": seen,
            "trained_tokens": learned,
            "dataset_sha256": m.dataset.sha256,
            "hyperparameters": m.to_json()["hyperparameters"],
            "trainer_version": __version__,
            **self._timings(outcome.tokens - tokens_before, training_s),
            **self._keep_best(peft_model, outcome.step),
            **self._revision(folder),
        }
        from trainer.export import export_adapter

        sha256, size = export_adapter(peft_model, s, m, metrics)
        what = "partial adapter (stopped)" if partial else "adapter"
        r.log(f"exported the {what}: {size} bytes, sha256 {sha256}")
        return r.exported(m.adapter.object_key, sha256, size, partial=partial)

    def _train(self, training: Any) -> tuple[Any, int, float]:
        """The loop's outcome, the tokens it had already trained (a resume), its seconds."""
        self.best = BestCheckpoint(self.s.work_dir / "best") if self.held_out else None
        self.stop.mode = TRAINING
        tokens_before, started = training.outcome.tokens, time.monotonic()
        outcome = training.run()
        self.stop.mode = EXPORTING
        return outcome, tokens_before, time.monotonic() - started

    def _revision(self, folder: Path) -> dict[str, Any]:
        """R19: the Hub commit the base model was read at (the snapshot's folder name)."""
        if self.m.base_model.source == "hub" and folder.parent.name == "snapshots":
            return {"base_model_revision": folder.name}
        return {}

    def _timings(self, tokens: int, training_s: float) -> dict[str, Any]:
        """R18: this start's seconds in the training loop, of them evaluating, and the tokens
        per second of each (a resumed run counts from its resume)."""
        train_s = max(training_s - self.eval_s, 1e-9)
        return {
            "training_seconds": round(training_s, 3),
            "eval_seconds": round(self.eval_s, 3),
            "tokens_per_s": round(tokens / train_s, 1),
            "eval_tokens_per_s": round(self.eval_tokens / self.eval_s, 1) if self.eval_s else None,
            "held_out": len(self.held_out),
        }

    def _keep_best(self, peft_model: Any, step: int) -> dict[str, Any]:
        """R17: with a validation split, the exported weights are the evaluated state with the
        lowest eval loss; which step that was and its loss go in the adapter's record."""
        if self.best is None or self.best.step is None:
            return {}
        if self.best.step != step:
            self.best.restore(peft_model)
            last = "" if self.eval_loss is None else f"; the last evaluated {self.eval_loss:.4f}"
            self.r.log(
                f"kept the best checkpoint: step {self.best.step} "
                f"(eval loss {self.best.eval_loss:.4f}){last}"
            )
        return {
            "eval_loss": self.eval_loss,
            "best_step": self.best.step,
            "best_eval_loss": self.best.eval_loss,
        }

    def _on_download(self, done: int, total: int | None) -> None:
        self.r.progress(
            "downloading_model", 0, 0, bytes_done=done, bytes_total=total, force=total is not None
        )

    def _deadline(self, peft_model: Any) -> Deadline:
        """R5: the manifest's deadline less the export reserve for this adapter's size."""
        lora_bytes = sum(
            p.numel() * p.element_size() for p in peft_model.parameters() if p.requires_grad
        )
        clock = Clock(os.environ.get(ENV_CLOCK_URL))
        return Deadline.for_training(self.m.deadline_at(), lora_bytes, clock)

    def _hold_out(self, examples: list[Any]) -> list[Any]:
        """The training examples, once the validation split (R16) is held out."""
        hp = self.m.hyperparameters
        examples, self.held_out = split_validation(examples, hp.validation_fraction, hp.seed)
        if self.held_out:
            self.r.log(f"validation: {len(self.held_out)} examples held out for eval_loss")
        return examples

    def _on_progress(self, o: Any, lr: float, tokens_per_s: float) -> bool:
        """Every `progress_s` seconds or every `progress_steps` optimizer steps, whichever
        comes first (R17: each report is a point of the run's curve), and the first and last."""
        every = self.s.tunables.progress_steps or max(1, o.total_steps // 20)
        force = o.step in (1, o.total_steps) or o.step % every == 0
        # eval_loss on the reports every `every` steps (and the first and last): a pass over
        # the held-out rows each time a report goes out by the clock would slow training
        eval_loss = None
        if force and self.held_out:
            started = time.monotonic()
            eval_loss = self.training.evaluate(self.held_out)
            self.eval_s += time.monotonic() - started
            self.eval_tokens += sum(len(e.input_ids) for e in self.held_out)
            if eval_loss is not None:
                self.eval_loss = eval_loss
                if self.best is not None:
                    self.best.offer(self.training.model, o.step, eval_loss)
        return self.r.progress(
            "training",
            o.step,
            o.total_steps,
            loss=o.last_loss,
            learning_rate=lr,
            tokens_per_s=round(tokens_per_s, 1),
            epoch=round(o.epoch, 4),
            grad_norm=o.grad_norm,
            eval_loss=eval_loss,
            force=force,
        )

    def _dataset(self) -> Path:
        spec = self.m.dataset
        if spec.url:
            dest = self.s.container_disk / "dataset" / self.s.run_id / "dataset.jsonl"
            try:
                transfer.get_to_file(spec.url, dest)
            except transfer.TransferError as e:
                raise TrainerFailure(FailureReason.DATASET_UNAVAILABLE, str(e)) from None
            return dest
        try:
            path = self.s.object_path(spec.object_key)
        except SettingsError as e:
            raise TrainerFailure(FailureReason.DATASET_UNAVAILABLE, str(e)) from None
        if not path.is_file():
            raise TrainerFailure(FailureReason.DATASET_UNAVAILABLE, f"{spec.object_key} not found")
        return path


def _seed(seed: int) -> None:
    import random

    import torch

    random.seed(seed)
    torch.manual_seed(seed)


def split_validation(
    examples: list[Any], fraction: float, seed: int
) -> tuple[list[Any], list[Any]]:
    """R16: (training, held out) examples: `fraction` of them, at least one, chosen by the seed
    (the same split on a resumed run), never all of them; none when `fraction` is 0."""
    if fraction <= 0 or len(examples) < 2:
        return examples, []
    count = min(len(examples) - 1, max(1, round(len(examples) * fraction)))
    order = list(range(len(examples)))
    random.Random(seed * 7_919 + 1).shuffle(order)
    held = set(order[:count])
    return (
        [e for i, e in enumerate(examples) if i not in held],
        [e for i, e in enumerate(examples) if i in held],
    )
