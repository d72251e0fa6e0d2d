"""The dataset inside the Pod (T1): read it, check it again (P1 rules, sha256), and turn each row
into token ids with the loss on what the model should learn to say.

OpenAI's chat semantics: every assistant message is trained unless its `weight` is 0; system,
developer, user and tool messages (and assistant messages of weight 0) are context. Each trained
message's text is found by rendering the conversation with the model's own chat template up to
that message (with and without it) and taking the difference: this works with every chat template,
where TRL's assistant-only masks need `{% generation %}` markers that the Llama 3.1/3.2 templates
lack. A row the template cannot render, or renders without one of its messages (a template that
drops tool calls, say), is refused with its line number."""

from __future__ import annotations

import contextlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer.errors import TrainerFailure
from trainer.protocol import FailureReason, check_dataset, read_chunks, trained

IGNORE = -100


@dataclass(frozen=True)
class Example:
    input_ids: list[int]
    labels: list[int]  # IGNORE where the loss does not look (context, padding)
    targets: int  # tokens the loss counts (labels after the first that are not IGNORE)


class Row(dict[str, Any]):
    """A dataset row that remembers its line in the file (for errors a user can find)."""

    line: int = 0


class RowRefused(ValueError):
    """The base model's chat template cannot render a row as it is."""


def load_rows(path: Path, *, sha256: str, fmt: str) -> list[dict[str, Any]]:
    """Every row of the dataset file, after the same checks as at registration."""
    rows: list[dict[str, Any]] = []

    def keep(line: int, row: dict[str, Any]) -> None:
        kept = Row(row)
        kept.line = line
        rows.append(kept)

    try:
        with path.open("rb") as f:
            check = check_dataset(read_chunks(f), on_row=keep)
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


def chat_messages(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The row as chat messages (a prompt/completion row is one user and one assistant turn),
    each as the chat template expects it: tool call arguments as objects, as HF templates do."""
    if "messages" not in row:
        return [
            {"role": "user", "content": str(row["prompt"])},
            {"role": "assistant", "content": str(row["completion"])},
        ]
    out = []
    for m in row["messages"]:
        message = {k: v for k, v in m.items() if k != "weight"}
        if m.get("tool_calls"):
            message["tool_calls"] = [_template_call(c) for c in m["tool_calls"]]
        out.append(message)
    return out


def _template_call(call: dict[str, Any]) -> dict[str, Any]:
    function = dict(call["function"])
    arguments = function.get("arguments", {})
    if isinstance(arguments, str):
        # text that is not JSON reaches the template as it was written
        with contextlib.suppress(ValueError):
            function["arguments"] = json.loads(arguments) if arguments.strip() else {}
    return {**call, "function": function}


def learned_flags(row: dict[str, Any]) -> list[bool]:
    """Per message of `chat_messages(row)`: does the loss learn it (P1's `trained`)."""
    if "messages" not in row:
        return [False, True]
    return [trained(m) for m in row["messages"]]


def _common_prefix(a: str, b: str) -> int:
    n = 0
    limit = min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


class Encoder:
    """Rows to token ids and labels, with the chat template when the tokenizer has one."""

    def __init__(self, tokenizer: Any, max_seq_len: int) -> None:
        self.tok = tokenizer
        self.max_len = max_seq_len
        self.has_template = bool(getattr(tokenizer, "chat_template", None))

    def _ids(self, text: str, *, specials: bool = False) -> list[int]:
        return list(self.tok(text, add_special_tokens=specials)["input_ids"])

    def _render(self, messages: list[dict[str, Any]], *, generation_prompt: bool) -> str:
        text = self.tok.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=generation_prompt
        )
        return str(text)

    def segments(self, row: dict[str, Any]) -> list[tuple[str, bool]]:
        """The row's text exactly as the model sees it, cut into (text, learned) pieces."""
        messages = chat_messages(row)
        flags = learned_flags(row)
        if not self.has_template:
            return self._plain_segments(row, messages, flags)
        try:
            full = self._render(messages, generation_prompt=False)
        except Exception as e:
            raise RowRefused(_template_refusal(e, messages)) from None
        _ensure_rendered(full, messages)
        spans: list[tuple[int, int]] = []
        for i, learn in enumerate(flags):
            if not learn:
                continue
            try:
                head = self._render(messages[:i], generation_prompt=True) if i else ""
            except Exception:
                head = ""
            through = self._render(messages[: i + 1], generation_prompt=False)
            # A template that renders earlier turns differently once more follows (dates,
            # stripped reasoning): keep what the full conversation shares with each rendering.
            start = _common_prefix(head, full)
            end = _common_prefix(through, full)
            start = max(start, spans[-1][1] if spans else 0)
            for call in messages[i].get("tool_calls") or ():
                if call["function"]["name"] not in full[start:end]:
                    raise RowRefused("the base model's chat template cannot render tool calls")
            if end <= start:
                raise RowRefused("the base model's chat template leaves out an assistant message")
            spans.append((start, end))
        pieces: list[tuple[str, bool]] = []
        at = 0
        for start, end in spans:
            if start > at:
                pieces.append((full[at:start], False))
            pieces.append((full[start:end], True))
            at = end
        if at < len(full):
            pieces.append((full[at:], False))
        return pieces

    def _plain_segments(
        self, row: dict[str, Any], messages: list[dict[str, Any]], flags: list[bool]
    ) -> list[tuple[str, bool]]:
        """Without a chat template: a prompt/completion row is its two texts; a conversation is
        `role: content` lines; each learned answer ends with the end-of-sequence token."""
        eos = self.tok.eos_token or ""
        if "messages" not in row:
            return [(str(row["prompt"]), False), (str(row["completion"]) + eos, True)]
        pieces: list[tuple[str, bool]] = []
        for m, learn in zip(messages, flags, strict=True):
            text = _plain_content(m)
            if m["role"] == "assistant":
                pieces.append(("assistant: ", False))
                pieces.append((text + eos, learn))
                pieces.append(("\n", False))
            else:
                pieces.append((f"{m['role']}: {text}\n", False))
        while pieces and not pieces[-1][1] and pieces[-1][0] == "\n":
            pieces.pop()
        return pieces

    def texts(self, row: dict[str, Any]) -> tuple[str, str]:
        """(context before the first learned text, the rest) as the model will see them."""
        pieces = self.segments(row)
        first = next(i for i, (_, learn) in enumerate(pieces) if learn)
        return "".join(t for t, _ in pieces[:first]), "".join(t for t, _ in pieces[first:])

    def encode(self, row: dict[str, Any]) -> Example | None:
        """None when truncation to max_seq_len leaves no learned token; RowRefused when the
        chat template cannot render the row."""
        ids: list[int] = []
        labels: list[int] = []
        for n, (text, learn) in enumerate(self.segments(row)):
            piece = self._ids(text, specials=n == 0 and not self.has_template)
            ids += piece
            labels += piece if learn else [IGNORE] * len(piece)
            if len(ids) >= self.max_len:
                break
        ids, labels = ids[: self.max_len], labels[: self.max_len]
        targets = sum(t != IGNORE for t in labels[1:])
        if targets == 0:
            return None
        return Example(ids, labels, targets)


def _plain_content(m: dict[str, Any]) -> str:
    text = m.get("content") or ""
    for call in m.get("tool_calls") or ():
        text += json.dumps(
            {"name": call["function"]["name"], "arguments": call["function"].get("arguments", {})}
        )
    return str(text)


def _ensure_rendered(full: str, messages: list[dict[str, Any]]) -> None:
    """A template that silently drops a message (a system prompt, say) would train on something
    else than the row: refuse it instead (tool calls are looked for in their own turn)."""
    for m in messages:
        content = m.get("content")
        if m["role"] == "assistant":
            continue  # some templates rewrite earlier answers (reasoning left out): see spans
        if isinstance(content, str) and content.strip() and content.strip() not in full:
            raise RowRefused(f"the base model's chat template leaves out the {m['role']} message")


def _template_refusal(error: Exception, messages: list[dict[str, Any]]) -> str:
    """A template's own refusal (`raise_exception`) is its author's words; anything else
    (a TypeError deep in Jinja) is said in ours."""
    roles = ", ".join(sorted({str(m["role"]) for m in messages}))
    if type(error).__name__ == "TemplateError" and str(error).strip():
        reason = str(error).strip().splitlines()[0][:200]
        return f"the base model's chat template refuses this conversation: {reason}"
    tools = " with tool calls" if any(m.get("tool_calls") for m in messages) else ""
    return f"the base model's chat template cannot render a conversation of {roles}{tools}"


def encode_rows(encoder: Encoder, rows: list[dict[str, Any]]) -> tuple[list[Example], int]:
    """The examples, and how many rows were dropped because nothing learned fit in max_seq_len.
    Rows the chat template cannot render fail the run, each named by its line."""
    examples: list[Example] = []
    refused: list[str] = []
    for index, row in enumerate(rows):
        try:
            example = encoder.encode(row)
        except RowRefused as e:
            refused.append(f"line {getattr(row, 'line', 0) or index + 1}: {e}")
            continue
        if example is not None:
            examples.append(example)
    if refused:
        shown = "; ".join(refused[:20])
        raise TrainerFailure(FailureReason.DATASET_INVALID, f"{len(refused)} problem(s): {shown}")
    if not examples:
        raise TrainerFailure(
            FailureReason.DATASET_INVALID,
            f"no row has a learned token within max_seq_len={encoder.max_len}",
        )
    return examples, len(rows) - len(examples)
