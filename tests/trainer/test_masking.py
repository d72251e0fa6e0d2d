"""T1: the loss looks only at the completion: decode the tokens whose label is not -100."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from trainer.data import IGNORE, Encoder, encode_rows
from trainer.errors import TrainerFailure


@pytest.fixture(scope="module")
def tokenizer(tiny_model: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model)


def _learned(tokenizer: Any, row: dict[str, Any], max_len: int = 256) -> tuple[str, str]:
    example = Encoder(tokenizer, max_len).encode(row)
    assert example is not None
    assert len(example.input_ids) == len(example.labels)
    learned = [t for t in example.labels if t != IGNORE]
    assert example.input_ids[-len(learned) :] == learned  # the completion is the tail
    assert example.targets == len(learned)
    return tokenizer.decode(example.input_ids), tokenizer.decode(learned)


def test_chat_rows_learn_only_the_last_assistant_message_and_its_end_token(tokenizer: Any) -> None:
    row = {
        "messages": [
            {"role": "system", "content": "Answer in one sentence."},
            {"role": "user", "content": "What colour is the sky?"},
            {"role": "assistant", "content": "The sky is blue."},
            {"role": "user", "content": "And the grass?"},
            {"role": "assistant", "content": "The grass is green."},
        ]
    }
    seen, learned = _learned(tokenizer, row)
    assert learned == "The grass is green.<|im_end|>\n"
    assert seen.startswith("<|im_start|>system\nAnswer in one sentence.<|im_end|>\n")
    assert "<|im_start|>assistant\nThe sky is blue.<|im_end|>" in seen  # context, not learned


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
