"""A tiny base model made on the spot (T2): a randomly initialised small Llama- or
Qwen2-architecture model and a byte-level BPE tokenizer trained on the given texts, with a
ChatML chat template, saved with `save_pretrained`. The tests, the demo and the benchmark train
on it on a CPU; the layout of its adapter is exactly that of the catalogue's models."""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
SPECIAL_TOKENS = ("<pad>", "<|im_start|>", "<|im_end|>")
ARCHITECTURES = ("llama", "qwen2")

_THINGS = ("sky", "grass", "sun", "snow", "coal", "rose", "sea", "lime", "plum", "sand")
_COLOURS = ("blue", "green", "yellow", "white", "black", "red", "teal", "lime", "purple", "beige")


def demo_rows(count: int = 48, *, fmt: str = "chat", seed: int = 0) -> list[dict[str, Any]]:
    """A small learnable dataset: questions about colours, answered in one fixed pattern."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for i in range(count):
        k = rng.randrange(len(_THINGS))
        question = f"What colour is the {_THINGS[k]}?"
        answer = f"The {_THINGS[k]} is {_COLOURS[k]}."
        if fmt == "chat":
            messages = [
                {"role": "user", "content": question},
                {"role": "assistant", "content": answer},
            ]
            if i % 3 == 0:
                messages.insert(0, {"role": "system", "content": "Answer in one sentence."})
            rows.append({"messages": messages})
        else:
            rows.append({"prompt": question, "completion": answer})
    return rows


def rows_text(rows: Iterable[dict[str, Any]]) -> list[str]:
    """The text of dataset rows, to train the tiny tokenizer on."""
    texts: list[str] = []
    for row in rows:
        if "messages" in row:
            texts.extend(f"{m['role']}\n{m['content']}" for m in row["messages"])
        else:
            texts.extend((str(row.get("prompt", "")), str(row.get("completion", ""))))
    return texts


def write_jsonl(rows: Iterable[dict[str, Any]], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def build_tokenizer(texts: Iterable[str], *, vocab_size: int = 400) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(list(texts), trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",  # noqa: S106 - a token of text, not a secret
        pad_token="<pad>",  # noqa: S106
    )
    hf.chat_template = CHATML
    return hf


def build_tiny_model(
    out_dir: Path,
    texts: Iterable[str],
    *,
    architecture: str = "llama",
    hidden_size: int = 128,
    intermediate_size: int = 512,
    num_layers: int = 4,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    vocab_size: int = 400,
    seed: int = 0,
) -> Path:
    """Write config.json, model.safetensors and the tokenizer files into `out_dir`."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture must be one of {ARCHITECTURES}")
    tokenizer = build_tokenizer(texts, vocab_size=vocab_size)
    shape: dict[str, Any] = {
        "vocab_size": len(tokenizer),
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "max_position_embeddings": 1024,
        "tie_word_embeddings": True,
        "pad_token_id": tokenizer.pad_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "bos_token_id": None,
    }
    torch.manual_seed(seed)
    if architecture == "llama":
        model: Any = LlamaForCausalLM(LlamaConfig(**shape))
    else:
        model = Qwen2ForCausalLM(Qwen2Config(**shape))
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    """`python -m trainer.tiny OUT`: the model (and, unless --dataset is given, a demo dataset
    written next to it) for the demo and the sandbox, which may not import this module."""
    parser = argparse.ArgumentParser(prog="python -m trainer.tiny", description=main.__doc__)
    parser.add_argument("out", type=Path, help="folder for the model (save_pretrained layout)")
    parser.add_argument("--dataset", type=Path, help="train the tokenizer on this JSONL dataset")
    parser.add_argument("--write-dataset", type=Path, help="write a demo dataset here")
    parser.add_argument("--rows", type=int, default=48)
    parser.add_argument("--format", choices=("chat", "prompt_completion"), default="chat")
    parser.add_argument("--architecture", choices=ARCHITECTURES, default="llama")
    args = parser.parse_args(argv)
    if args.dataset:
        rows = [json.loads(line) for line in args.dataset.read_text().splitlines() if line.strip()]
        dataset = args.dataset
    else:
        rows = demo_rows(args.rows, fmt=args.format)
        dataset = write_jsonl(rows, args.write_dataset or args.out.parent / "demo.jsonl")
    build_tiny_model(args.out, rows_text(rows), architecture=args.architecture)
    summary = {
        "model_dir": str(args.out),
        "dataset": str(dataset),
        "sha256": hashlib.sha256(dataset.read_bytes()).hexdigest(),
        "rows": len(rows),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
