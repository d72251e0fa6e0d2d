"""What a worker-vllm worker does, on the CPU: load the base model and LoRA adapters from the
network volume with transformers + peft and answer chat completions greedily at temperature 0.

torch, transformers and peft are imported on first use (a cold start pays for them, as a real
worker pays for pulling its image); each worker keeps what it loaded until it scales to zero.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class WorkerError(Exception):
    """A request the worker refuses (vLLM answers these 400 or 404 with an OpenAI error body)."""

    def __init__(self, status: int, message: str, kind: str = "BadRequestError") -> None:
        super().__init__(message)
        self.status = status
        self.kind = kind


@dataclass
class Completion:
    text: str
    pieces: list[str]  # the text token by token (what a stream sends)
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str


@dataclass
class LoadedModels:
    """One worker's memory: the tokenizer and models it loaded, by (base folder, adapter folder)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    models: dict[tuple[str, str | None], tuple[Any, Any]] = field(default_factory=dict)

    def get(self, base: Path, adapter: Path | None) -> tuple[Any, Any]:
        key = (str(base), str(adapter) if adapter else None)
        with self.lock:
            if key not in self.models:
                self.models[key] = _load(base, adapter)
            return self.models[key]


def _load(base: Path, adapter: Path | None) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if not (base / "config.json").is_file():
        raise WorkerError(500, f"no model at {base.name}: config.json is missing", "InternalError")
    tok = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32).eval()
    if adapter is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapter).eval()
    return tok, model


def check_adapter(folder: Path, served_model: str, max_rank: int) -> None:
    """vLLM's filesystem resolver: the folder holds a LoRA for the served model, within rank."""
    config_path = folder / "adapter_config.json"
    if not config_path.is_file() or not (folder / "adapter_model.safetensors").is_file():
        raise WorkerError(404, f"The model `{folder.name}` does not exist.", "NotFoundError")
    try:
        config = json.loads(config_path.read_text())
    except ValueError:
        raise WorkerError(400, f"{folder.name}: adapter_config.json is not JSON") from None
    if config.get("peft_type") != "LORA":
        raise WorkerError(400, f"{folder.name}: peft_type must be LORA")
    if config.get("base_model_name_or_path") != served_model:
        raise WorkerError(
            400,
            f"{folder.name} was made for {config.get('base_model_name_or_path')!r}, "
            f"this worker serves {served_model!r}",
        )
    rank = config.get("r")
    if not isinstance(rank, int) or rank > max_rank:
        raise WorkerError(400, f"LoRA rank {rank} is greater than max_lora_rank {max_rank}")


def generate(
    loaded: LoadedModels,
    base: Path,
    adapter: Path | None,
    messages: list[dict[str, Any]],
    max_tokens: int,
    temperature: float,
    seed: int | None = None,
) -> Completion:
    import torch

    tok, model = loaded.get(base, adapter)
    try:
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    except Exception as exc:  # a template that cannot render these messages
        raise WorkerError(400, f"messages: {exc}") from None
    ids = tok(text, return_tensors="pt").input_ids
    sample = temperature > 0
    if sample and seed is not None:
        torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_tokens,
            do_sample=sample,
            temperature=temperature if sample else None,
            top_p=None,
            top_k=None,
            pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
            eos_token_id=tok.eos_token_id,
        )
    new = [int(t) for t in out[0][ids.shape[1] :]]
    stopped = bool(new) and new[-1] == tok.eos_token_id
    shown = new[:-1] if stopped else new
    pieces, previous = [], ""
    for i in range(len(shown)):
        upto = tok.decode(shown[: i + 1], skip_special_tokens=True)
        pieces.append(upto[len(previous) :])
        previous = upto
    return Completion(
        text=previous,
        pieces=[p for p in pieces if p],
        prompt_tokens=int(ids.shape[1]),
        completion_tokens=len(new),
        finish_reason="stop" if stopped else "length",
    )
