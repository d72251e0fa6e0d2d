"""What a worker-vllm worker does, on the CPU: load the base model and LoRA adapters from the
network volume with transformers + peft and answer chat completions greedily at temperature 0.

A worker is a child process (`python -m runpod_sandbox.serving_worker`), as the real trainer is,
so the training stack never enters the process that serves the sandbox (and, under `serve
--sandbox`, the control plane): one JSON request a line on stdin, one JSON answer a line on
stdout. Starting it and loading the base model is the cold start; it keeps what it loaded until
the sandbox scales it to zero (kills it).
"""

from __future__ import annotations

import json
import sys
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from runpod_sandbox.serving_checks import WorkerError, check_adapter


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


def answer(loaded: LoadedModels, request: dict[str, Any]) -> dict[str, Any]:
    try:
        base = Path(request["base"])
        if request.get("warm"):
            loaded.get(base, None)
            return {"ok": True}
        adapter = Path(request["adapter"]) if request.get("adapter") else None
        if adapter is not None:
            check_adapter(adapter, str(request["served_model"]), int(request["max_rank"]))
        done = generate(
            loaded,
            base,
            adapter,
            list(request["messages"]),
            int(request["max_tokens"]),
            float(request["temperature"]),
            request.get("seed"),
        )
        return {"ok": True, "completion": asdict(done)}
    except WorkerError as exc:
        return {"ok": False, "status": exc.status, "message": str(exc), "kind": exc.kind}
    except Exception as exc:  # the worker stays up, as vLLM answers a failed request 500
        message = f"{type(exc).__name__}: {exc}"
        return {"ok": False, "status": 500, "message": message, "kind": "InternalError"}


def main() -> int:
    loaded = LoadedModels()
    for line in sys.stdin:
        if line.strip():
            reply = answer(loaded, json.loads(line))
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
