"""T1: the contract module the control plane shares with the trainer (stdlib only)."""

from __future__ import annotations

import ast
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from trainer import protocol as p

ROOT = Path(__file__).resolve().parents[2]


def test_protocol_imports_only_the_stdlib_and_itself() -> None:
    stdlib = set(sys.stdlib_module_names)
    for path in (ROOT / "trainer" / "protocol").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                assert (
                    top in stdlib or top == "__future__" or name.startswith("trainer.protocol")
                ), f"{path.name} imports {name}"


def _reports() -> list[p.Report]:
    common: dict[str, Any] = {"boot": "b00t", "time": "2026-12-01T00:00:00.000Z"}
    return [
        p.Progress(
            seq=1,
            phase="training",
            step=3,
            total_steps=24,
            loss=2.5,
            learning_rate=1e-4,
            tokens_per_s=812.5,
            **common,
        ),
        p.Progress(seq=2, phase="loading", step=0, total_steps=0, **common),
        p.Log(seq=3, text='line with "quotes", a newline\nand ünïcode \u2028', **common),
        p.Exported(
            seq=4,
            object_key="runs/r/adapter.zip",
            sha256="ab" * 32,
            size_bytes=10,
            partial=True,
            **common,
        ),
        p.Failed(seq=5, reason="dataset_invalid", detail="line 3: not valid JSON", **common),
        p.Heartbeat(seq=6, **common),
    ]


@pytest.mark.parametrize("report", _reports(), ids=lambda r: f"{r.type}-{r.seq}")
def test_every_report_round_trips_through_one_stdout_line(report: p.Report) -> None:
    line = p.format_report_line(report)
    assert line.startswith("TENSORANT-REPORT {") and "\n" not in line and line.isascii()
    assert p.parse_report_line(line) == report
    assert p.parse_report_line("2026-12-01T00:00:01Z stdout " + line) == report
    assert p.report_from_json(json.loads(line.split(" ", 1)[1])) == report


@pytest.mark.parametrize(
    "line",
    [
        "Loading weights: 100%",
        "TENSORANT-REPORT not json",
        'TENSORANT-REPORT {"type":"progress","boot":"b","seq":1}',
        'TENSORANT-REPORT {"type":"teleport","boot":"b","seq":1,"time":"t"}',
        'TENSORANT-REPORT {"type":"log","boot":"b","seq":-1,"time":"t","text":"x"}',
        'TENSORANT-REPORT {"type":"exported","boot":"b","seq":1,"time":"t","object_key":"k",'
        '"sha256":"s","size_bytes":1,"partial":"no"}',
    ],
)
def test_ordinary_and_damaged_lines_are_not_reports(line: str) -> None:
    assert p.parse_report_line(line) is None


def test_unknown_fields_are_ignored_so_fields_can_be_added() -> None:
    body = _reports()[0].to_json() | {"gpu_memory_gb": 12.5}
    assert p.report_from_json(body) == _reports()[0]


def test_status_json_is_the_latest_progress_plus_its_heartbeat() -> None:
    progress = _reports()[0]
    assert isinstance(progress, p.Progress)
    status = p.Status(
        run_id="r", progress=progress, updated_at="u", last_activity_at="a", attempt=2
    )
    body = json.loads(json.dumps(status.to_json()))
    assert p.Status.from_json(body) == status
    assert p.report_from_json(body) == progress  # the same dedupe key (boot, seq) as the report


def _manifest(**changes: object) -> dict[str, object]:
    body: dict[str, object] = {
        "version": 1,
        "run_id": "run-9",
        "kind": "full",
        "base_model": {"source": "hub", "id": "Qwen/Qwen2.5-0.5B-Instruct"},
        "dataset": {"object_key": "datasets/d.jsonl", "sha256": "0" * 64, "format": "chat"},
        "hyperparameters": {"lora_r": 16, "target_modules": ["v_proj", "q_proj"]},
        "trial": {"max_rows": 100, "max_steps": 20},
        "adapter": {"object_key": "runs/run-9/adapter.zip"},
        "recovery_path": "/workspace/data/adapter.zip",
    }
    body.update(changes)
    return body


def test_a_manifest_round_trips_and_fills_per_architecture_defaults() -> None:
    m = p.Manifest.from_json(_manifest())
    assert m.hyperparameters.target_modules == ("q_proj", "v_proj")
    assert m.hyperparameters.learning_rate == p.Hyperparameters().learning_rate
    assert m.base_model.name == "Qwen/Qwen2.5-0.5B-Instruct" and m.storage == "runpod_volume"
    assert p.Manifest.loads(m.dumps()) == m
    small, large = p.default_hyperparameters("qwen2", 0.5), p.default_hyperparameters("llama", 70)
    assert small.batch_size * small.gradient_accumulation == 16
    assert large.batch_size == 1 and large.gradient_accumulation == 16
    assert p.default_hyperparameters("gemma2", 27).learning_rate < p.Hyperparameters().learning_rate


def test_a_custom_s3_manifest_carries_urls_and_a_storage_model_names_itself() -> None:
    body = _manifest(
        base_model={
            "source": "storage",
            "path": "models/mine",
            "url_by_file": {"config.json": "https://s3/x"},
        },
        dataset={
            "object_key": "d.jsonl",
            "sha256": "A" * 64,
            "format": "prompt_completion",
            "url": "https://s3/d",
        },
        adapter={"object_key": "runs/run-9/adapter.zip", "upload_url": "https://s3/put"},
        mailbox={
            "status_url": "https://s3/s",
            "result_url": "https://s3/r",
            "log_urls": ["https://s3/l0"],
        },
    )
    m = p.Manifest.from_json(body)
    assert m.storage == "s3" and m.mailbox is not None and m.mailbox.log_urls == ("https://s3/l0",)
    assert m.base_model.name == "storage:models/mine" and m.dataset.sha256 == "a" * 64
    assert p.Manifest.loads(m.dumps()) == m


@pytest.mark.parametrize(
    "changes",
    [
        {"version": 2},
        {"kind": "huge"},
        {"run_id": "../etc"},
        {"base_model": {"source": "hub"}},
        {"dataset": {"object_key": "d", "sha256": "xyz", "format": "chat"}},
        {"dataset": {"object_key": "d", "sha256": "0" * 64, "format": "csv"}},
        {"hyperparameters": {"lora_r": 0}},
        {"hyperparameters": {"target_modules": ["embed_tokens"]}},
        {"hyperparameters": {"learning_rate": "fast"}},
        {"mailbox": {"status_url": "https://s3/s", "result_url": "https://s3/r"}},  # no dataset.url
        {"adapter": None},
    ],
)
def test_a_malformed_manifest_is_refused_as_such(changes: dict[str, object]) -> None:
    with pytest.raises(p.ManifestError):
        p.Manifest.from_json(_manifest(**changes))


def test_mailbox_keys_and_the_volume_manifest_url() -> None:
    assert p.status_key("r1") == "runs/r1/status.json"
    assert p.result_key("r1") == "runs/r1/result.json"
    assert p.log_chunk_key("r1", "b00t", 12) == "runs/r1/logs/b00t-00000012.jsonl"
    assert p.adapter_key("r1") == "runs/r1/adapter.zip"
    assert p.volume_manifest_url("r1") == "file:///workspace/runs/r1/manifest.json"
    assert p.redact_url("https://u:pw@s3.example:9000/b/k?X-Amz-Signature=abc") == (
        "https://s3.example:9000/b/k"
    )
    with pytest.raises(ValueError, match="run id"):
        p.status_key("a/../b")


def _check(data: bytes, max_line_bytes: int = p.dataset.MAX_LINE_BYTES) -> p.DatasetCheck:
    return p.check_dataset(p.read_chunks(io.BytesIO(data)), max_line_bytes=max_line_bytes)


def test_a_valid_dataset_of_either_format_counts_its_rows_and_hashes_its_bytes() -> None:
    import hashlib

    chat = (
        b'\xef\xbb\xbf{"messages": [{"role": "user", "content": "hi"}, '
        b'{"role": "assistant", "content": "yo"}]}\n'
        b"\n   \n"
        b'{"messages": [{"role": "system", "content": ""}, {"role": "assistant", "content": "x"}]}'
    )
    check = _check(chat)
    assert (check.ok, check.format, check.row_count, check.size_bytes) == (
        True,
        "chat",
        2,
        len(chat),
    )
    assert check.sha256 == hashlib.sha256(chat).hexdigest()
    pc = b'{"prompt": "", "completion": "a"}\n{"prompt": "q", "completion": "b", "meta": 1}\n'
    assert (_check(pc).format, _check(pc).row_count) == ("prompt_completion", 2)


def test_every_bad_row_is_named_by_its_line_and_only_the_first_twenty_are_listed() -> None:
    good = b'{"prompt": "q", "completion": "a"}\n'
    rows = [
        good,
        b"not json\n",
        b"[1, 2]\n",
        b'{"prompt": "q", "completion": "  "}\n',
        b'{"messages": [{"role": "user", "content": "hi"}]}\n',
        b"\xff\xfe\n",
        b'{"messages": [{"role": "assistant", "content": "a"}]}\n',
        b'{"text": "x"}\n',
        b'{"messages": [{"role": "robot", "content": "a"}]}\n',
    ]
    check = _check(b"".join(rows))
    assert not check.ok and check.row_count == 1
    assert [(x.line, x.problem.split(" (")[0].split(":")[0]) for x in check.problems] == [
        (2, "not valid JSON at column 1"),
        (3, "not a JSON object"),
        (4, "completion is empty"),
        (5, "no assistant message to learn from"),
        (6, "not valid UTF-8"),
        (7, "a chat row in a prompt_completion file"),
        (8, 'needs "messages" or "prompt" and "completion"'),
        (9, "messages[0] role must be one of system, developer, user, assistant, tool"),
    ]
    many = _check(good + b"{\n" * 30)
    assert many.problem_count == 30 and len(many.problems) == p.MAX_PROBLEMS
    assert many.problems[-1].line == 21
    assert _check(b"\n\n").problems == [p.DatasetProblem(0, "the file has no rows")]


def test_the_check_streams_in_bounded_memory_whatever_the_chunking() -> None:
    data = b'{"prompt": "q", "completion": "a"}\n' * 50 + b'{"prompt": "' + b"x" * 5000 + b'"}\n'
    whole = _check(data, max_line_bytes=1000)
    one_byte = p.check_dataset((data[i : i + 1] for i in range(len(data))), max_line_bytes=1000)
    assert whole == one_byte
    assert whole.row_count == 50 and whole.problems == [
        p.DatasetProblem(51, "line is longer than 1000 bytes")
    ]


TOOL_ROW = {
    "messages": [
        {"role": "developer", "content": "Use the tools."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "18 C, sunny"},
        {"role": "assistant", "content": "18 C and sunny.", "weight": 1},
        {"role": "user", "content": "Thanks"},
        {"role": "assistant", "content": "You are welcome.", "weight": 0},
    ]
}


def test_openai_chat_rows_with_every_role_tool_calls_and_weights_are_valid() -> None:
    check = _check((json.dumps(TOOL_ROW) + "\n").encode())
    assert (check.ok, check.format, check.row_count) == (True, "chat", 1), check.problems
    assert [p.trained(m) for m in TOOL_ROW["messages"]] == [
        False, False, True, False, True, False, False
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ({"role": "assistant", "content": "a", "weight": 2}, "weight must be 0 or 1"),
        ({"role": "assistant", "content": "a", "weight": True}, "weight must be 0 or 1"),
        ({"role": "user", "content": "a", "weight": 1}, "only an assistant message"),
        ({"role": "user", "content": "a", "tool_calls": []}, "only an assistant message"),
        ({"role": "assistant", "content": None, "tool_calls": []}, "non-empty list"),
        ({"role": "assistant", "tool_calls": [{"function": {}}]}, 'needs a "function"'),
        ({"role": "tool", "content": "r", "tool_call_id": 7}, "tool_call_id must be a string"),
        ({"role": "assistant", "content": None}, "content must be a string"),
    ],
)
def test_a_malformed_message_is_named_in_plain_words(
    message: dict[str, object], problem: str
) -> None:
    row = {
        "messages": [
            {"role": "user", "content": "q"},
            message,
            {"role": "assistant", "content": "a"},
        ]
    }
    check = _check((json.dumps(row) + "\n").encode())
    assert [x.line for x in check.problems] == [1]
    assert (
        check.problems[0].problem.startswith("messages[1] ")
        and problem in check.problems[0].problem
    )


def test_only_weight_zero_answers_leave_nothing_to_learn() -> None:
    row = {
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "a", "weight": 0},
        ]
    }
    check = _check((json.dumps(row) + "\n").encode())
    assert check.problems == [
        p.DatasetProblem(1, "no assistant message to learn from (each is empty or has weight 0)")
    ]


@pytest.mark.parametrize(
    ("line", "words"),
    [
        (b"{'prompt': 'q'}", "at column 2: a key must be in double quotes"),
        (b'{"prompt": "q" "completion": "a"}', "at column 16: a comma is missing"),
        (b'{"prompt": "q", "completion": "a"} {}', "there is more than one JSON value"),
        (b'{"prompt": "q, "completion": "a"}', "at column 17: a comma is missing"),
        (b'{"prompt": "q", "completion": "a}', "a string is not closed"),
        (b'{"prompt": "q", "completion": tru}', "a value is missing or is not JSON"),
        (b"[" * 100_000, "not valid JSON"),
    ],
)
def test_a_line_that_is_not_json_is_said_in_plain_words_with_its_column(
    line: bytes, words: str
) -> None:
    (problem,) = _check(line + b"\n").problems
    assert (
        problem.line == 1
        and problem.problem.startswith("not valid JSON")
        and words in problem.problem
    )
    assert "Expecting" not in problem.problem and "char " not in problem.problem


def test_json_from_outside_is_parsed_with_a_depth_limit() -> None:
    from trainer.protocol import MAX_JSON_DEPTH, JsonTooDeep, bounded_loads, parse_report_line

    ok = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert bounded_loads(ok) is not None
    for deep in ("[" * 100_000 + "]" * 100_000, '{"a":' * 65 + "1" + "}" * 65):
        with pytest.raises(JsonTooDeep, match="nested deeper than 64 levels"):
            bounded_loads(deep)
    # Brackets and escaped quotes inside strings are text, not nesting.
    text = '["' + '[\\"' * 1000 + '"]'
    assert bounded_loads(text) == ['["' * 1000]
    line = "TENSORANT-REPORT " + '{"boot":"b","seq":1,"type":"log","text":' + "[" * 5000
    assert parse_report_line(line) is None


def test_report_integers_fit_a_64_bit_store() -> None:
    from trainer.protocol import ReportError, report_from_json

    base = {"boot": "b" * 16, "time": "", "type": "heartbeat"}
    assert report_from_json({**base, "seq": 2**63 - 1}).seq == 2**63 - 1
    for seq in (2**63, -1, True, "1"):
        with pytest.raises(ReportError):
            report_from_json({**base, "seq": seq})
    with pytest.raises(ReportError, match="boot must be 1 to 64"):
        report_from_json({**base, "seq": 1, "boot": "b" * 65})
