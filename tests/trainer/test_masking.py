"""T1/P1: the loss looks only at what the model should learn to say (every assistant message
whose weight is not 0, a completion): decode the tokens whose label is not -100."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainer.data import IGNORE, Encoder, Row, encode_rows
from trainer.errors import TrainerFailure


@pytest.fixture(scope="module")
def tokenizer(tiny_model: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def learned_runs(tokenizer: Any, input_ids: list[int], labels: list[int]) -> list[str]:
    """The text of each unbroken run of tokens that carry loss (labels != -100)."""
    runs: list[list[int]] = []
    for i, (token, label) in enumerate(zip(input_ids, labels, strict=True)):
        if label == IGNORE:
            continue
        assert label == token
        if i and labels[i - 1] != IGNORE:
            runs[-1].append(token)
        else:
            runs.append([token])
    return [tokenizer.decode(r) for r in runs]


def _runs(tokenizer: Any, row: dict[str, Any], max_len: int = 256) -> tuple[str, list[str]]:
    example = Encoder(tokenizer, max_len).encode(row)
    assert example is not None
    assert len(example.input_ids) == len(example.labels)
    assert example.targets == sum(t != IGNORE for t in example.labels[1:])
    return tokenizer.decode(example.input_ids), learned_runs(
        tokenizer, example.input_ids, example.labels
    )


def _learned(tokenizer: Any, row: dict[str, Any], max_len: int = 256) -> tuple[str, str]:
    seen, runs = _runs(tokenizer, row, max_len)
    assert len(runs) == 1, runs
    return seen, runs[0]


THREE_TURNS = {
    "messages": [
        {"role": "system", "content": "Answer in one sentence."},
        {"role": "user", "content": "What colour is the sky?"},
        {"role": "assistant", "content": "The sky is blue."},
        {"role": "user", "content": "And the snow?"},
        {"role": "assistant", "content": "The snow is black.", "weight": 0},
        {"role": "user", "content": "And the grass?"},
        {"role": "assistant", "content": "The grass is green.", "weight": 1},
    ]
}


def test_every_assistant_message_is_learned_unless_its_weight_is_zero(tokenizer: Any) -> None:
    seen, runs = _runs(tokenizer, THREE_TURNS)
    assert runs == ["The sky is blue.<|im_end|>\n", "The grass is green.<|im_end|>\n"]
    assert seen.startswith("<|im_start|>system\nAnswer in one sentence.<|im_end|>\n")
    # the weight-0 answer is context the model sees, not something it learns to say
    assert "<|im_start|>assistant\nThe snow is black.<|im_end|>" in seen


def test_a_trailing_user_turn_or_empty_answer_does_not_become_the_completion(
    tokenizer: Any,
) -> None:
    row = {
        "messages": [
            {"role": "user", "content": "What colour is the sun?"},
            {"role": "assistant", "content": "The sun is yellow."},
            {"role": "user", "content": "Thanks"},
            {"role": "assistant", "content": "  "},
        ]
    }
    _, learned = _learned(tokenizer, row)
    assert learned == "The sun is yellow.<|im_end|>\n"


# A ChatML template that renders tool calls and results the way Qwen2.5's does.
TOOL_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant\n"
    "{% if m.content %}{{ m.content }}\n{% endif %}"
    "{% for c in m.tool_calls %}<tool_call>{{ {'name': c.function.name, "
    "'arguments': c.function.arguments} | tojson }}</tool_call>{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>{{ m.content }}"
    "</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
TOOL_ROW = {
    "messages": [
        {"role": "developer", "content": "Use the tools."},
        {"role": "user", "content": "Sky colour?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "colour", "arguments": '{"thing": "sky"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "blue"},
        {"role": "assistant", "content": "The sky is blue."},
    ]
}


def _with_template(tokenizer: Any, template: str | None) -> Any:
    import copy

    other = copy.copy(tokenizer)
    other.chat_template = template
    return other


def test_tool_rows_train_the_call_and_the_answer_when_the_template_renders_tools(
    tokenizer: Any,
) -> None:
    seen, runs = _runs(_with_template(tokenizer, TOOL_TEMPLATE), TOOL_ROW)
    assert runs == [
        '<tool_call>{"name": "colour", "arguments": {"thing": "sky"}}</tool_call><|im_end|>\n',
        "The sky is blue.<|im_end|>\n",
    ]
    assert "<tool_response>blue</tool_response>" in seen
    assert seen.startswith("<|im_start|>developer\nUse the tools.<|im_end|>")


@pytest.mark.parametrize(
    ("template", "words"),
    [
        (None, ""),  # the tiny model's own ChatML: `+ None` fails inside Jinja
        ("drops", "cannot render tool calls"),
        ("refuses", "refuses this conversation: Tools are not supported"),
    ],
)
def test_a_row_the_template_cannot_render_is_refused_with_its_line_number(
    tokenizer: Any, template: str | None, words: str
) -> None:
    chatml = tokenizer.chat_template
    if template == "drops":  # renders the call's empty content, silently losing the call
        template = chatml.replace("message['content']", "(message['content'] or '')")
    elif template == "refuses":
        template = (
            "{% for m in messages %}{% if m.tool_calls %}"
            "{{ raise_exception('Tools are not supported') }}{% endif %}{% endfor %}" + chatml
        )
    else:
        template = chatml
    encoder = Encoder(_with_template(tokenizer, template), 256)
    plain = Row({"prompt": "Sky?", "completion": "Blue."})
    plain.line = 3
    tool = Row(TOOL_ROW)
    tool.line = 7
    with pytest.raises(TrainerFailure) as failure:
        encode_rows(encoder, [plain, Row({"messages": THREE_TURNS["messages"]}), tool])
    assert failure.value.reason == "dataset_invalid"
    detail = failure.value.detail
    assert detail.startswith("1 problem(s): line 7: the base model's chat template "), detail
    assert words in detail
    assert "TypeError" not in detail and "NoneType" not in detail and "jinja" not in detail.lower()


def test_prompt_completion_rows_learn_only_the_completion_in_the_chat_template(
    tokenizer: Any,
) -> None:
    seen, learned = _learned(
        tokenizer, {"prompt": "What colour is the sea?", "completion": "The sea is teal."}
    )
    assert learned == "The sea is teal.<|im_end|>\n"
    assert seen.startswith(
        "<|im_start|>user\nWhat colour is the sea?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_without_a_chat_template_the_completion_ends_with_the_eos_token(tokenizer: Any) -> None:
    template, tokenizer.chat_template = tokenizer.chat_template, None
    try:
        seen, learned = _learned(
            tokenizer, {"prompt": "What colour is the sea?", "completion": " Teal."}
        )
        assert (seen, learned) == ("What colour is the sea? Teal.<|im_end|>", " Teal.<|im_end|>")
        chat = {
            "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
        }
        seen, learned = _learned(tokenizer, chat)
        assert (seen, learned) == ("user: Hi\nassistant: Yo<|im_end|>", "Yo<|im_end|>")
    finally:
        tokenizer.chat_template = template


def test_rows_whose_completion_does_not_fit_are_left_out_and_none_fitting_is_a_dataset_failure(
    tokenizer: Any,
) -> None:
    long_prompt = {"prompt": "What colour is the sky? " * 20, "completion": "Blue."}
    short = {"prompt": "Sky?", "completion": "Blue."}
    examples, dropped = encode_rows(Encoder(tokenizer, 24), [long_prompt, short])
    assert (len(examples), dropped) == (1, 1) and all(len(e.input_ids) <= 24 for e in examples)
    with pytest.raises(TrainerFailure) as failure:
        encode_rows(Encoder(tokenizer, 24), [long_prompt])
    assert failure.value.reason == "dataset_invalid"


def test_a_real_cpu_trial_puts_loss_on_exactly_the_weighted_turns(
    tiny_model: Path, tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Acceptance: rows of three assistant turns, one of weight 0, trained by the trainer
    itself; the labels the model was given carry loss on exactly the other two turns."""
    from dataclasses import replace

    from tests.trainer.fixtures import HYPERPARAMETERS, make_workspace, run_in_process
    from trainer import loop
    from trainer.protocol import Exported

    fed: list[tuple[list[int], list[int]]] = []
    collate = loop.Batches.collate

    def recording(self: loop.Batches, rows: list[Any], device: Any) -> dict[str, Any]:
        batch = collate(self, rows, device)
        for ids, labels, mask in zip(
            batch["input_ids"].tolist(),
            batch["labels"].tolist(),
            batch["attention_mask"].tolist(),
            strict=True,
        ):
            n = sum(mask)
            fed.append((ids[:n], labels[:n]))
        return batch

    monkeypatch.setattr(loop.Batches, "collate", recording)
    things = [("sky", "blue"), ("sun", "yellow"), ("sea", "teal"), ("coal", "black")]
    rows = []
    for i in range(12):
        a, b, c = (things[(i + k) % len(things)] for k in range(3))
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": f"What colour is the {a[0]}?"},
                    {"role": "assistant", "content": f"The {a[0]} is {a[1]}."},
                    {"role": "user", "content": f"What colour is the {b[0]}?"},
                    {"role": "assistant", "content": f"The {b[0]} is {b[1]}.", "weight": 0},
                    {"role": "user", "content": f"What colour is the {c[0]}?"},
                    {"role": "assistant", "content": f"The {c[0]} is {c[1]}.", "weight": 1},
                ]
            }
        )
    hp = replace(HYPERPARAMETERS, max_steps=3, batch_size=2, gradient_accumulation=2)
    ws = make_workspace(tmp_path / "ws", tiny_model, rows=rows, hyperparameters=hp)
    result, lines = run_in_process(ws)
    assert isinstance(result.final, Exported), result.final
    assert len(fed) == 3 * 2 * 2
    encoded = [Encoder(tokenizer, hp.max_seq_len).encode(r) for r in rows]
    seen = sum(len(e.input_ids) for e in encoded if e)
    learned = sum(e.targets for e in encoded if e)
    assert any(
        f"dataset tokens: {seen} in 12 examples, {learned} of them trained" in line
        for line in lines
    )
    for ids, labels in fed:
        text = tokenizer.decode(ids)
        m = next(r["messages"] for r in rows if all(x["content"] in text for x in r["messages"]))
        assert learned_runs(tokenizer, ids, labels) == [
            f"{m[1]['content']}<|im_end|>\n",
            f"{m[5]['content']}<|im_end|>\n",
        ]
        assert f"{m[3]['content']}<|im_end|>" in text  # seen as context


def test_a_template_that_silently_drops_a_role_is_refused_not_trained_on_something_else(
    tokenizer: Any,
) -> None:
    """Qwen2.5's template renders no `developer` message; training without it would teach the
    answers without the instructions the row holds."""
    chatml = tokenizer.chat_template
    no_developer = (
        "{% set messages = messages | rejectattr('role', 'equalto', 'developer') | list %}"
    )
    encoder = Encoder(_with_template(tokenizer, no_developer + chatml), 256)
    row = Row(
        {
            "messages": [
                {"role": "developer", "content": "Answer in French."},
                {"role": "user", "content": "Sky?"},
                {"role": "assistant", "content": "Bleu."},
            ]
        }
    )
    row.line = 12
    with pytest.raises(TrainerFailure) as failure:
        encode_rows(encoder, [row])
    assert failure.value.detail == (
        "1 problem(s): line 12: the base model's chat template leaves out the developer message"
    )
    # the same row trains where the template renders developer messages
    (example,), _ = encode_rows(Encoder(tokenizer, 256), [row])
    assert learned_runs(tokenizer, example.input_ids, example.labels) == ["Bleu.<|im_end|>\n"]


def test_a_real_cpu_trial_trains_tool_rows_when_the_template_renders_tools(
    tiny_model: Path, tmp_path: Path, tokenizer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """OpenAI tool rows (developer, tool_calls, tool results) through the trainer itself, on a
    copy of the tiny model whose chat template renders tools as Qwen2.5's does: the call and the
    final answer carry loss; the tool's result is context."""
    import shutil
    from dataclasses import replace

    from tests.trainer.fixtures import HYPERPARAMETERS, make_workspace, run_in_process
    from trainer import loop
    from trainer.protocol import Exported

    model = tmp_path / "tool-model"
    shutil.copytree(tiny_model, model)
    (model / "chat_template.jinja").write_text(TOOL_TEMPLATE)
    fed: list[tuple[list[int], list[int]]] = []
    collate = loop.Batches.collate

    def recording(self: loop.Batches, rows: list[Any], device: Any) -> dict[str, Any]:
        for r in rows:
            fed.append((r.input_ids, r.labels))
        return collate(self, rows, device)

    monkeypatch.setattr(loop.Batches, "collate", recording)
    hp = replace(
        HYPERPARAMETERS, max_steps=2, batch_size=2, gradient_accumulation=1, max_seq_len=512
    )
    ws = make_workspace(tmp_path / "ws", model, rows=[TOOL_ROW] * 10, hyperparameters=hp)
    result, _ = run_in_process(ws)
    assert isinstance(result.final, Exported), result.final
    assert len(fed) == 4
    for ids, labels in fed:
        assert learned_runs(tokenizer, ids, labels) == [
            '<tool_call>{"name": "colour", "arguments": {"thing": "sky"}}</tool_call><|im_end|>\n',
            "The sky is blue.<|im_end|>\n",
        ]
        assert "<tool_response>blue</tool_response>" in tokenizer.decode(ids)
