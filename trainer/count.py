"""`python -m trainer.count`: a dataset's token counts for a base model's tokenizer, counted
exactly as the trainer counts them (its `Encoder`, the "dataset tokens" log line). The control
plane never imports tokenizers or transformers: it runs this in a child process and reads the
one JSON line it prints, `{"tokens", "trained_tokens", "examples", "rows"}` or
`{"unavailable": why}`.

`--serve` keeps one child for many counts (P1 at scale: importing transformers costs seconds of
CPU, counting a dataset milliseconds): it reads one JSON request per line on stdin, with the
arguments' names, answers one JSON line each, and ends when stdin closes (its parent is gone)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from trainer.errors import TrainerFailure


def count(
    dataset: Path, tokenizer_folder: str, max_seq_len: int, sha256: str, fmt: str
) -> dict[str, Any]:
    from trainer import data

    try:
        rows = data.load_rows(dataset, sha256=sha256, fmt=fmt)
    except TrainerFailure as e:
        return {"unavailable": f"the dataset cannot be read: {e}"}
    try:
        from transformers import AutoTokenizer
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_folder))
    except (OSError, ValueError, KeyError) as e:
        return {"unavailable": f"the tokenizer does not load: {type(e).__name__}: {e}"}
    encoder = data.Encoder(tokenizer, max_seq_len)
    try:
        examples, _dropped = data.encode_rows(encoder, rows)
    except TrainerFailure as e:
        return {"unavailable": f"the base model cannot encode the dataset: {e}"[:500]}
    return {
        "tokens": sum(len(e.input_ids) for e in examples),
        "trained_tokens": sum(e.targets for e in examples),
        "examples": len(examples),
        "rows": len(rows),
    }


def serve(lines: Any = None, out: Any = None) -> int:
    """Answer count requests, one JSON line in, one JSON line out, until stdin ends."""
    lines = sys.stdin if lines is None else lines
    out = sys.stdout if out is None else out
    for line in lines:
        if not line.strip():
            continue
        try:
            req = json.loads(line)
            result = count(
                Path(req["dataset"]),
                str(req["tokenizer"]),
                int(req["max_seq_len"]),
                str(req["sha256"]),
                str(req.get("format", "chat")),
            )
        except Exception as e:  # one bad request must not end the counts that follow
            result = {"unavailable": f"the token counter failed: {type(e).__name__}: {e}"[:500]}
        out.write(json.dumps(result) + "\n")
        out.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Print a dataset's token counts for a tokenizer as one JSON line."""
    if (sys.argv[1:] if argv is None else argv) == ["--serve"]:
        return serve()
    parser = argparse.ArgumentParser(prog="python -m trainer.count", description=main.__doc__)
    parser.add_argument("dataset", type=Path, help="the dataset's JSONL file")
    parser.add_argument(
        "tokenizer", help="a folder with the model's tokenizer files, or a Hub model id"
    )
    parser.add_argument("--max-seq-len", type=int, required=True)
    parser.add_argument("--sha256", required=True, help="the dataset version's sha256")
    parser.add_argument("--format", choices=("chat", "prompt_completion"), default="chat")
    args = parser.parse_args(argv)
    result = count(args.dataset, args.tokenizer, args.max_seq_len, args.sha256, args.format)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
