"""The training loop (T1): a small loop of our own over transformers + peft, not HF Trainer/TRL.

Why our own: SIGTERM is a flag checked between micro-batches at every phase (HF's JIT checkpoint
handler lives only inside `train()` and returns normally after it), checkpoints are written
atomically as safetensors with a completion marker (no pickled optimizer or training args), and
the per-step work is exactly a plain loop's plus a few scalars, so it keeps pace with one
(bench/trainer_speed.py). Loss is summed over completion tokens and divided by the number of
completion tokens in the whole accumulated batch, like HF's `num_items_in_batch`.

Memory: a micro-batch's rows go through the model in groups of at most `micro_batch_tokens`
tokens (rows × padded length; the control plane's memory model sets it for the GPU), and each
group's output is dropped before the next forward, so only one group's logits are ever alive.
Splitting changes no gradient: the loss is normalised by the whole step's token count. Out of
memory mid-run resumes from the last checkpoint with half the token budget, once; a second out
of memory fails the run (`out_of_memory`)."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from trainer.checkpoint import CheckpointStore
from trainer.data import IGNORE, Example
from trainer.errors import TrainerFailure
from trainer.protocol import FailureReason, Hyperparameters

WARMUP_FRACTION = 0.03
MAX_GRAD_NORM = 1.0


def total_steps(examples: int, hp: Hyperparameters, cap: int | None = None) -> int:
    """Optimizer steps: max_steps when set, else the epochs' worth; a trial caps it."""
    per_epoch = math.ceil(examples / hp.batch_size)
    steps = hp.max_steps or math.ceil(hp.epochs * per_epoch / hp.gradient_accumulation)
    return max(1, min(steps, cap) if cap else steps)


def learning_rate(
    step: int, total: int, peak: float, warmup_ratio: float = WARMUP_FRACTION
) -> float:
    """Linear warm-up over the first `warmup_ratio` of the steps (R16), then linear decay (step
    counts from 0)."""
    warmup = max(1, round(total * warmup_ratio))
    if step < warmup:
        return peak * (step + 1) / warmup
    return peak * (total - step) / max(1, total - warmup)


def token_groups(rows: list[Example], budget: int) -> list[list[Example]]:
    """The rows in groups whose padded size (rows × longest row) is at most `budget` tokens,
    shortest rows together; a row longer than the budget goes alone. 0: one group."""
    if budget <= 0:
        return [rows]
    groups: list[list[Example]] = []
    current: list[Example] = []
    for row in sorted(rows, key=lambda r: len(r.input_ids)):
        # sorted ascending: this row is the longest of the group so far
        if current and len(row.input_ids) * (len(current) + 1) > budget:
            groups.append(current)
            current = []
        current.append(row)
    if current:
        groups.append(current)
    return groups


def is_out_of_memory(error: BaseException) -> bool:
    """torch.OutOfMemoryError (torch.cuda.OutOfMemoryError is the same class) from any device."""
    return type(error).__name__ == "OutOfMemoryError"


class Batches:
    """Micro-batch `m` is the same rows whatever happened before: the order of each epoch is a
    shuffle seeded by (seed, epoch), so a resumed run continues exactly where it stopped."""

    def __init__(self, examples: list[Example], batch_size: int, seed: int, pad_id: int) -> None:
        self.examples = examples
        self.batch_size = batch_size
        self.seed = seed
        self.pad_id = pad_id
        self.per_epoch = math.ceil(len(examples) / batch_size)
        self._orders: dict[int, list[int]] = {}

    def _order(self, epoch: int) -> list[int]:
        if epoch not in self._orders:
            order = list(range(len(self.examples)))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
            self._orders = {epoch: order}
        return self._orders[epoch]

    def rows(self, m: int) -> list[Example]:
        epoch, index = divmod(m, self.per_epoch)
        picked = self._order(epoch)[index * self.batch_size : (index + 1) * self.batch_size]
        return [self.examples[i] for i in picked]

    def collate(self, rows: list[Example], device: Any) -> dict[str, Any]:
        import torch

        width = max(len(r.input_ids) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        labels = torch.full((len(rows), width), IGNORE, dtype=torch.long)
        for i, r in enumerate(rows):
            n = len(r.input_ids)
            ids[i, :n] = torch.tensor(r.input_ids)
            mask[i, :n] = 1
            labels[i, :n] = torch.tensor(r.labels)
        return {
            "input_ids": ids.to(device),
            "attention_mask": mask.to(device),
            "labels": labels.to(device),
        }


@dataclass
class Outcome:
    step: int  # optimizer steps done
    total_steps: int
    interrupted: bool
    first_loss: float | None = None
    last_loss: float | None = None
    tokens: int = 0
    losses: list[float] = field(default_factory=list)
    grad_norm: float | None = None  # the last optimizer step's, before clipping (R17)
    epoch: float = 0.0  # epochs done (R17)


class Training:
    def __init__(
        self,
        model: Any,
        batches: Batches,
        hp: Hyperparameters,
        total: int,
        device: Any,
        *,
        stop_requested: Callable[[], bool],
        on_progress: Callable[[Outcome, float, float], bool],
        checkpoints: CheckpointStore | None = None,
        checkpoint_s: float = 600.0,
        checkpoint_steps: int = 0,
        boot: str = "",
        on_micro_batch: Callable[[int], None] | None = None,
        on_note: Callable[[str], None] | None = None,
    ) -> None:
        import torch

        self.model = model
        self.batches = batches
        self.hp = hp
        self.total = total
        self.device = device
        self.stop_requested = stop_requested
        self.on_progress = on_progress
        self.checkpoints = checkpoints
        self.checkpoint_s = checkpoint_s
        self.checkpoint_steps = checkpoint_steps
        self.boot = boot
        self.on_micro_batch = on_micro_batch
        self.on_note = on_note
        self.token_budget = hp.micro_batch_tokens
        self.halved = False  # out of memory once already: the next one fails the run
        self._largest_group = 0  # tokens of the largest group that went through the model
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=hp.learning_rate, weight_decay=0.0)
        self.outcome = Outcome(step=0, total_steps=total, interrupted=False)
        self._step_start = self.outcome
        self._in_optimizer_step = False

    def resume(self) -> int:
        """Continue from the newest complete checkpoint, if any; the step it was at."""
        if self.checkpoints is None or (path := self.checkpoints.latest()) is None:
            return 0
        restored = self.checkpoints.load(path, self.model, self.optimizer)
        s = restored.state
        self.outcome = Outcome(
            step=restored.step,
            total_steps=self.total,
            interrupted=False,
            first_loss=s.get("first_loss"),
            last_loss=s.get("last_loss"),
            tokens=int(s.get("tokens", 0)),
            losses=list(s.get("losses", [])),
        )
        if s.get("halved"):  # a budget halved after an out of memory stays halved
            self.token_budget = int(s["micro_batch_tokens"])
            self.halved = True
        return restored.step

    def _checkpoint(self) -> None:
        if self.checkpoints is None:
            return
        o = self.outcome
        state = {
            "first_loss": o.first_loss,
            "last_loss": o.last_loss,
            "tokens": o.tokens,
            "losses": o.losses[-1000:],
            "total_steps": self.total,
            "micro_batch_tokens": self.token_budget,
            "halved": self.halved,
        }
        self.checkpoints.save(o.step, self.model, self.optimizer, state, self.boot)

    def run(self) -> Outcome:
        while True:
            try:
                return self._run()
            except Exception as e:
                if not is_out_of_memory(e):
                    raise
                message = str(e)
            # outside the except block: the traceback's frames, and the tensors they hold, are
            # gone before the cache is emptied
            self._after_out_of_memory(message)

    def _after_out_of_memory(self, message: str) -> None:
        """Free what the failed step held, halve the token budget and go back to the last
        checkpoint (or, when there is none, to the start of this step: an out of memory in a
        forward or backward pass leaves the weights and the optimizer as they were; one inside
        the optimizer's step does not, and fails without a checkpoint)."""
        import torch

        step = self.outcome.step
        first_line = (message.splitlines() or [""])[0][:300]
        self.optimizer.zero_grad(set_to_none=True)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        checkpoint = self.checkpoints.latest() if self.checkpoints is not None else None
        if self.halved or (self._in_optimizer_step and checkpoint is None):
            raise TrainerFailure(
                FailureReason.OUT_OF_MEMORY,
                f"out of memory at step {step + 1} with micro-batches of at most "
                f"{self._largest_group} tokens"
                + (" (already halved once)" if self.halved else "")
                + f": {first_line}",
            ) from None
        # half of what actually went through the model (a budget may be larger than any group)
        before = min(self.token_budget or self._largest_group, self._largest_group)
        self.outcome = self._step_start
        resumed = self.resume() if checkpoint is not None else 0
        self.halved = True
        self.token_budget = max(1, before // 2)
        self._largest_group = 0  # from now on, what went through with the halved budget
        where = f"the checkpoint at step {resumed}" if resumed else f"step {step}"
        if self.on_note is not None:
            self.on_note(
                f"out of memory at step {step + 1} (micro-batches of {before} tokens): "
                f"resuming from {where} with half, {self.token_budget} tokens"
            )

    def evaluate(self, rows: list[Example]) -> float | None:
        """R17: the mean loss per completion token over held-out `rows` (no gradient), in
        micro-batches as training takes them; None without rows."""
        import torch

        total, count = 0.0, 0
        self.model.eval()
        try:
            with torch.no_grad():
                for i in range(0, len(rows), self.hp.batch_size):
                    for part in token_groups(rows[i : i + self.hp.batch_size], self.token_budget):
                        items = sum(r.targets for r in part)
                        if not items:
                            continue
                        batch = self.batches.collate(part, self.device)
                        loss = self.model(**batch, num_items_in_batch=items).loss
                        total += float(loss.item()) * items
                        count += items
        finally:
            self.model.train()
        return total / count if count else None

    def _record_step(self, o: Outcome, step: int, loss: float, grad_norm: float) -> None:
        """What an optimizer step leaves in the outcome (and its progress report)."""
        o.step = step
        o.last_loss = loss
        o.first_loss = loss if o.first_loss is None else o.first_loss
        o.losses.append(loss)
        o.grad_norm = grad_norm if math.isfinite(grad_norm) else None
        o.epoch = step * self.hp.gradient_accumulation / self.batches.per_epoch

    def _run(self) -> Outcome:
        import torch

        ga = self.hp.gradient_accumulation
        o = self.outcome
        self.model.train()
        last_checkpoint = time.monotonic()
        window_tokens, window_start = 0, time.monotonic()
        while o.step < self.total:
            step = o.step
            self._step_start = replace(o, losses=list(o.losses))
            self._in_optimizer_step = False
            lr = learning_rate(step, self.total, self.hp.learning_rate, self.hp.warmup_ratio)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            micro = [self.batches.rows(step * ga + j) for j in range(ga)]
            items = sum(r.targets for rows in micro for r in rows)
            step_loss = torch.zeros((), device=self.device)
            for rows in micro:
                for part in token_groups(rows, self.token_budget):
                    if self.stop_requested():
                        o.interrupted = True
                        self.optimizer.zero_grad(set_to_none=True)
                        return o
                    width = max(len(r.input_ids) for r in part)
                    self._largest_group = max(self._largest_group, width * len(part))
                    batch = self.batches.collate(part, self.device)
                    # Only the loss is kept: the output (and its logits) is freed before the
                    # next forward instead of living through it.
                    loss = self.model(**batch, num_items_in_batch=items).loss
                    del batch
                    loss.backward()
                    step_loss += loss.detach()
                    del loss
                tokens = sum(len(r.input_ids) for r in rows)
                o.tokens += tokens
                window_tokens += tokens
                if self.on_micro_batch is not None:
                    self.on_micro_batch(step)
            norm = torch.nn.utils.clip_grad_norm_(self.params, MAX_GRAD_NORM)
            self._in_optimizer_step = True
            self.optimizer.step()
            self._in_optimizer_step = False
            self.optimizer.zero_grad(set_to_none=True)
            loss_value = float(step_loss.item())
            if not math.isfinite(loss_value):
                raise TrainerFailure(
                    FailureReason.TRAINING_DIVERGED,
                    f"the loss became {loss_value} at step {step + 1}",
                )
            self._record_step(o, step + 1, loss_value, float(norm.item()))
            now = time.monotonic()
            if self.on_progress(o, lr, window_tokens / max(now - window_start, 1e-9)):
                window_tokens, window_start = 0, now
            due = now - last_checkpoint >= self.checkpoint_s or (
                self.checkpoint_steps and o.step % self.checkpoint_steps == 0
            )
            if due and o.step < self.total:
                self._checkpoint()
                last_checkpoint = time.monotonic()
        return o
