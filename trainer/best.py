"""The best checkpoint (R17 evaluation): with a validation split, the adapter a run exports is the
state with the lowest eval loss it measured, not merely the last one (as OpenAI's and Together's
fine-tuning keep the best of their evaluated checkpoints).

Only the trainable (LoRA) weights are kept, as safetensors on the volume: a trainer restarted in
its Pod still knows its best. Each new best is written into a fresh `step-<n>` folder and only
then named by `best.json` (replaced atomically), so a trainer killed while writing leaves the
previous best whole."""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

from trainer.mailbox import fsync_dir, write_atomically

POINTER = "best.json"
WEIGHTS = "adapter.safetensors"


class BestCheckpoint:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.step: int | None = None
        self.eval_loss: float | None = None
        try:
            found = json.loads((root / POINTER).read_text())
            if (root / f"step-{int(found['step'])}" / WEIGHTS).is_file():
                self.step, self.eval_loss = int(found["step"]), float(found["eval_loss"])
        except (OSError, ValueError, KeyError, TypeError):
            pass  # none yet (or damaged): the next evaluation starts a new best

    def offer(self, model: Any, step: int, eval_loss: float | None) -> bool:
        """Keep the model's trainable weights when `eval_loss` is lower than any before."""
        if eval_loss is None or not math.isfinite(eval_loss):
            return False
        if self.eval_loss is not None and eval_loss >= self.eval_loss:
            return False
        from safetensors.torch import save_file

        tensors = {
            name: p.detach().to("cpu").contiguous().clone()
            for name, p in model.named_parameters()
            if p.requires_grad
        }
        folder = self.root / f"step-{step}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        save_file(tensors, str(folder / WEIGHTS))
        with (folder / WEIGHTS).open("rb") as f:
            os.fsync(f.fileno())
        fsync_dir(folder)
        pointer = json.dumps({"step": step, "eval_loss": eval_loss}).encode()
        write_atomically(self.root / POINTER, pointer)
        previous = self.step
        self.step, self.eval_loss = step, eval_loss
        if previous is not None and previous != step:
            shutil.rmtree(self.root / f"step-{previous}", ignore_errors=True)
        return True

    def restore(self, model: Any) -> None:
        """Put the best weights back into the model (before its export)."""
        import torch
        from safetensors.torch import load_file

        assert self.step is not None
        kept = load_file(str(self.root / f"step-{self.step}" / WEIGHTS))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name in kept:
                    p.copy_(kept[name].to(p.device, p.dtype))
