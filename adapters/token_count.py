"""The `TokenCounter` port as a child process: `python -m trainer.count` (the control plane
never imports tokenizers or transformers; the child does, and prints one JSON line)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any


class ChildTokenCounter:
    def __init__(self, hf_endpoint: str, timeout_s: float = 600.0) -> None:
        self.hf_endpoint = hf_endpoint
        self.timeout_s = timeout_s

    def count(
        self, dataset: Path, tokenizer: str, max_seq_len: int, sha256: str, fmt: str
    ) -> dict[str, Any]:
        # no secret reaches the child: a gated catalogue model's tokenizer is unavailable
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_TOKEN", "TENSORANT_"))}
        env["HF_ENDPOINT"] = self.hf_endpoint
        env["TOKENIZERS_PARALLELISM"] = "false"
        try:
            # our own module, no shell; `--` so a model id is never read as an option
            done = subprocess.run(  # noqa: S603
                [
                    sys.executable,
                    "-m",
                    "trainer.count",
                    "--max-seq-len",
                    str(max_seq_len),
                    "--sha256",
                    sha256,
                    "--format",
                    fmt,
                    "--",
                    str(dataset),
                    tokenizer,
                ],
                capture_output=True,
                text=True,
                timeout=self.timeout_s,
                env=env,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return {"unavailable": f"counting took longer than {self.timeout_s:.0f} s"}
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return {"unavailable": f"the token counter failed: {tail[:300]}"}
        result: dict[str, Any] = json.loads(lines[-1])
        return result
