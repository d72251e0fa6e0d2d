"""Checkpoints on the volume that a restarted trainer can trust (T1).

A checkpoint is written into a temporary folder, each file fsynced, then `complete.json` (sizes
and sha256 of every file) last, and only then is the folder renamed to `step-<n>`. A trainer
killed halfway leaves a `.tmp-*` folder that is never read; a folder whose files disagree with
its `complete.json` is skipped too. Everything is safetensors or JSON: no pickles."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.mailbox import fsync_dir

COMPLETE = "complete.json"
FILES = ("adapter.safetensors", "optimizer.safetensors", "rng.safetensors", "state.json")


@dataclass(frozen=True)
class Restored:
    step: int
    state: dict[str, Any]
    path: Path


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _fsync(path: Path) -> None:
    with path.open("rb") as f:
        os.fsync(f.fileno())


class CheckpointStore:
    def __init__(self, root: Path, *, keep: int = 2) -> None:
        self.root = root
        self.keep = keep

    def _complete(self) -> list[tuple[int, Path]]:
        if not self.root.is_dir():
            return []
        found = []
        for p in self.root.iterdir():
            if p.name.startswith("step-") and p.name[5:].isdigit():
                found.append((int(p.name[5:]), p))
        return sorted(found, reverse=True)

    def _valid(self, path: Path) -> bool:
        try:
            manifest = json.loads((path / COMPLETE).read_text())
            return all(
                (path / name).stat().st_size == meta["size"]
                and _sha256(path / name) == meta["sha256"]
                for name, meta in manifest["files"].items()
            ) and set(manifest["files"]) == set(FILES)
        except (OSError, ValueError, KeyError, TypeError):
            return False

    def latest(self) -> Path | None:
        """The newest checkpoint that was completely written, or None."""
        for _, path in self._complete():
            if self._valid(path):
                return path
        return None

    def save(self, step: int, model: Any, optimizer: Any, state: dict[str, Any], boot: str) -> Path:
        from safetensors.torch import save_file

        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".tmp-{step:08d}-{boot}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        save_file(trainable_state(model), str(tmp / "adapter.safetensors"))
        tensors, groups = _flatten_optimizer(optimizer.state_dict())
        save_file(tensors, str(tmp / "optimizer.safetensors"))
        save_file(rng_state(), str(tmp / "rng.safetensors"))
        (tmp / "state.json").write_text(json.dumps({**state, "step": step, "param_groups": groups}))
        files = {}
        for name in FILES:
            _fsync(tmp / name)
            files[name] = {"size": (tmp / name).stat().st_size, "sha256": _sha256(tmp / name)}
        (tmp / COMPLETE).write_text(json.dumps({"step": step, "files": files}))
        _fsync(tmp / COMPLETE)
        fsync_dir(tmp)
        final = self.root / f"step-{step:08d}"
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        fsync_dir(self.root)
        self._prune()
        return final

    def _prune(self) -> None:
        for _, old in self._complete()[self.keep :]:
            shutil.rmtree(old, ignore_errors=True)
        for p in self.root.glob(".tmp-*"):
            shutil.rmtree(p, ignore_errors=True)

    def load(self, path: Path, model: Any, optimizer: Any) -> Restored:
        from safetensors.torch import load_file

        state = json.loads((path / "state.json").read_text())
        load_trainable_state(model, load_file(str(path / "adapter.safetensors")))
        tensors = load_file(str(path / "optimizer.safetensors"))
        optimizer.load_state_dict(_unflatten_optimizer(tensors, state.pop("param_groups")))
        set_rng_state(load_file(str(path / "rng.safetensors")))
        return Restored(step=int(state["step"]), state=state, path=path)


def trainable_state(model: Any) -> dict[str, Any]:
    return {
        n: p.detach().to("cpu").contiguous() for n, p in model.named_parameters() if p.requires_grad
    }


def load_trainable_state(model: Any, tensors: dict[str, Any]) -> None:
    import torch

    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    if set(params) != set(tensors):
        raise ValueError("the checkpoint's adapter does not match this model's LoRA parameters")
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(tensors[name].to(p.device, p.dtype))


def _flatten_optimizer(sd: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    import torch

    tensors: dict[str, Any] = {}
    for index, values in sd["state"].items():
        for key, value in values.items():
            t = value if torch.is_tensor(value) else torch.tensor(value)
            tensors[f"{index}.{key}"] = t.detach().to("cpu").contiguous()
    return tensors, sd["param_groups"]


def _unflatten_optimizer(tensors: dict[str, Any], groups: list[dict[str, Any]]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for name, t in tensors.items():
        index, key = name.split(".", 1)
        state.setdefault(int(index), {})[key] = t
    return {"state": state, "param_groups": groups}


def rng_state() -> dict[str, Any]:
    import torch

    out = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            out[f"cuda.{i}"] = s
    return out


def set_rng_state(tensors: dict[str, Any]) -> None:
    import torch

    torch.set_rng_state(tensors["cpu"])
    if torch.cuda.is_available():
        keys = sorted((k for k in tensors if k.startswith("cuda.")), key=lambda k: int(k[5:]))
        cuda = [tensors[k] for k in keys]
        if len(cuda) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(cuda)
