"""The dataset inside the Pod (T1): read it, check it again (P1 rules, sha256), and turn each row
into token ids with the loss masked to the completion. A conversation is split into prompt (the
messages before the last non-empty assistant message) and completion (that message): this works
with every chat template, where TRL's assistant-only masks refuse the Llama 3.1/3.2 templates."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.errors import TrainerFailure
from trainer.protocol import FailureReason, check_dataset, read_chunks

IGNORE = -100


@dataclass(frozen=True)
class Example:
    input_ids: list[int]
    labels: list[int]  # IGNORE where the loss does not look (prompt, padding)
    targets: int  # tokens the loss counts (labels after the first that are not IGNORE)


def load_rows(path: Path, *, sha256: str, fmt: str) -> list[dict[str, Any]]:
    """Every row of the dataset file, after the same checks as at registration."""
    rows: list[dict[str, Any]] = []
    try:
        with path.open("rb") as f:
            check = check_dataset(read_chunks(f), on_row=lambda _line, row: rows.append(row))
    except OSError as e:
        raise TrainerFailure(
            FailureReason.DATASET_UNAVAILABLE, f"cannot read the dataset: {e}"
        ) from None
    if check.sha256 != sha256:
        raise TrainerFailure(
            FailureReason.DATASET_CHANGED,
            f"the dataset's sha256 is {check.sha256}, it was {sha256} when it was checked",
        )
    if not check.ok:
        lines = "; ".join(f"line {p.line}: {p.problem}" for p in check.problems)
        raise TrainerFailure(
            FailureReason.DATASET_INVALID, f"{check.problem_count} problem(s): {lines}"
        )
    if check.format != fmt:
        raise TrainerFailure(
            FailureReason.DATASET_INVALID, f"the rows are {check.format}, the run expected {fmt}"
        )
    return rows


def sample_rows(rows: list[dict[str, Any]], max_rows: int, seed: int) -> list[dict[str, Any]]:
    """A trial's sample: `max_rows` rows drawn with the run's seed, in file order."""
    if len(rows) <= max_rows:
        return rows
    keep = sorted(random.Random(seed).sample(range(len(rows)), max_rows))
    return [rows[i] for i in keep]


def split_row(row: dict[str, Any]) -> tuple[list[dict[str, str]], dict[str, str]] | tuple[str, str]:
    """Chat: (prompt messages, last non-empty assistant message); else (prompt, completion)."""
    if "messages" not in row:
        return str(row["prompt"]), str(row["completion"])
    messages = [{"role": m["role"], "content": m["content"]} for m in row["messages"]]
    last = max(
        i for i, m in enumerate(messages) if m["role"] == "assistant" and m["content"].strip()
    )
    return messages[:last], messages[last]


class Encoder:
    """Rows to token ids and labels, with the chat template when the tokenizer has one."""

    def __init__(self, tokenizer: Any, max_seq_len: int) -> None:
        self.tok = tokenizer
        self.max_len = max_seq_len
        self.has_template = bool(getattr(tokenizer, "chat_template", None))

    def _ids(self, text: str, *, specials: bool = False) -> list[int]:
        return list(self.tok(text, add_special_tokens=specials)["input_ids"])

    def _render(self, messages: list[dict[str, str]], *, generation_prompt: bool) -> str:
        text = self.tok.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt
        )
        return str(text)

    def texts(self, row: dict[str, Any]) -> tuple[str, str]:
        """(prompt text, completion text) exactly as the model will see them."""
        prompt, completion = split_row(row)
        if isinstance(prompt, str):
            assert isinstance(completion, str)
            if not self.has_template:
                return prompt, completion + (self.tok.eos_token or "")
            prompt = [{"role": "user", "content": prompt}]
            completion = {"role": "assistant", "content": completion}
        assert isinstance(completion, dict)
        if not self.has_template:
            head = "".join(f"{m['role']}: {m['content']}\n" for m in prompt)
            return head + "assistant: ", completion["content"] + (self.tok.eos_token or "")
        full = self._render([*prompt, completion], generation_prompt=False)
        try:
            head = self._render(prompt, generation_prompt=True) if prompt else ""
        except Exception:
            head = ""
        if not full.startswith(head):
            # A template that renders earlier turns differently once an answer follows: keep
            # the longest common prefix as the prompt.
            n = 0
            while n < min(len(full), len(head)) and full[n] == head[n]:
                n += 1
            head = full[:n]
        return head, full[len(head) :]

    def encode(self, row: dict[str, Any]) -> Example | None:
        """None when truncation to max_seq_len leaves no completion token to learn from."""
        prompt, completion = self.texts(row)
        prompt_ids = self._ids(prompt, specials=not self.has_template)
        completion_ids = self._ids(completion)
        ids = (prompt_ids + completion_ids)[: self.max_len]
        labels = ([IGNORE] * len(prompt_ids) + completion_ids)[: self.max_len]
        targets = sum(t != IGNORE for t in labels[1:])
        if targets == 0:
            return None
        return Example(ids, labels, targets)


def encode_rows(encoder: Encoder, rows: list[dict[str, Any]]) -> tuple[list[Example], int]:
    """The examples, and how many rows were dropped because nothing of the completion fit."""
    examples = [e for e in (encoder.encode(r) for r in rows) if e is not None]
    if not examples:
        raise TrainerFailure(
            FailureReason.DATASET_INVALID,
            f"no row has a completion token within max_seq_len={encoder.max_len}",
        )
    return examples, len(rows) - len(examples)
